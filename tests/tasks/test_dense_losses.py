"""Tests for the dense-task losses: minimum at the target, finite gradients, masks, hand values."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from sapiens2_ft.tasks.matting.loss import matting_loss
from sapiens2_ft.tasks.normal.loss import normal_loss
from sapiens2_ft.tasks.pointmap.loss import pointmap_loss
from sapiens2_ft.tasks.seg.loss import segmentation_loss


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _unit_normals(b=2, h=6, w=7, seed=0) -> torch.Tensor:
    return F.normalize(torch.randn(b, 3, h, w, generator=_gen(seed)), dim=1)


def _pointmap(b=2, h=8, w=8, seed=0) -> torch.Tensor:
    """A bumpy surface about 2-3 m in front of the camera."""
    g = _gen(seed)
    ys, xs = torch.meshgrid(torch.linspace(-0.5, 0.5, h), torch.linspace(-0.5, 0.5, w), indexing="ij")
    z = 2.0 + torch.rand(b, 1, 1, 1, generator=g) + 0.1 * torch.rand(b, 1, h, w, generator=g)
    return torch.cat([xs.expand(b, 1, h, w) * z, ys.expand(b, 1, h, w) * z, z], dim=1)


def _assert_finite_grad(loss: torch.Tensor, *inputs: torch.Tensor) -> None:
    loss.backward()
    for x in inputs:
        assert x.grad is not None and torch.isfinite(x.grad).all()


# --------------------------------------------------------------- segmentation
def test_segmentation_minimum_and_grad():
    labels = torch.randint(0, 4, (2, 5, 6), generator=_gen())
    perfect = 50.0 * F.one_hot(labels, 4).permute(0, 3, 1, 2).float()
    out = segmentation_loss(perfect, labels)
    assert set(out) == {"ce", "dice", "loss"} and out["loss"].item() < 1e-6
    logits = torch.randn(2, 4, 5, 6, generator=_gen(1), requires_grad=True)
    out = segmentation_loss(logits, labels, class_weights=torch.tensor([0.5, 1.0, 2.0, 1.0]))
    assert out["loss"] > 0.1
    _assert_finite_grad(out["loss"], logits)


def test_segmentation_ignore_index():
    labels = torch.randint(0, 3, (1, 4, 4), generator=_gen())
    labels[0, :2] = 255
    logits = torch.randn(1, 3, 4, 4, generator=_gen(1))
    other = logits.clone()
    other[0, :, :2] = torch.randn(3, 2, 4, generator=_gen(2)) * 10
    a, b = segmentation_loss(logits, labels), segmentation_loss(other, labels)
    for k in a:
        torch.testing.assert_close(a[k], b[k])
    all_ignored = segmentation_loss(logits, torch.full((1, 4, 4), 255))
    assert all_ignored["ce"].item() == 0.0 and torch.isfinite(all_ignored["loss"])


def test_segmentation_hand_value():
    # two pixels, 2 classes, zero logits -> p = 0.5 everywhere; labels [0, 1]
    logits = torch.zeros(1, 2, 1, 2)
    labels = torch.tensor([[[0, 1]]])
    out = segmentation_loss(logits, labels, class_weights=torch.tensor([1.0, 3.0]), ce_weight=2.0)
    assert out["ce"].item() == pytest.approx((1 + 3) * math.log(2) / 2)  # sum of w_y * nll over all 2 pixels
    # foreground class 1: sum P G = 0.5, sum P^2 = 0.25 + 0.25, sum G^2 = 1, eps 1e-3
    dice = 1 - (2 * 0.5 + 1e-3) / (0.5 + 1 + 1e-3)
    assert out["dice"].item() == pytest.approx(dice)
    assert out["loss"].item() == pytest.approx(2 * 2 * math.log(2) + dice)
    with pytest.raises(ValueError, match="labels must lie"):
        segmentation_loss(logits, torch.tensor([[[0, 2]]]))


# --------------------------------------------------------------------- normal
def test_normal_minimum_grad_and_mask():
    target = _unit_normals()
    mask = torch.rand(2, 6, 7, generator=_gen(3)) > 0.3
    out = normal_loss(target * 1.0, target, mask)
    assert set(out) == {"cos", "l1", "grad", "loss"} and out["loss"].item() < 1e-6
    pred = torch.randn(2, 3, 6, 7, generator=_gen(1), requires_grad=True)
    out = normal_loss(pred, target, mask)
    _assert_finite_grad(out["loss"], pred)
    changed_pred, changed_tgt = pred.detach().clone(), target.clone()
    changed_pred[~mask.unsqueeze(1).expand_as(pred)] = 7.0
    changed_tgt[~mask.unsqueeze(1).expand_as(pred)] = float("nan")
    changed_pred.requires_grad_(True)
    again = normal_loss(changed_pred, changed_tgt, mask.unsqueeze(1))
    for k in out:
        torch.testing.assert_close(out[k].detach(), again[k].detach())
    _assert_finite_grad(again["loss"], changed_pred)  # NaN targets reach no gradient either
    with pytest.raises(ValueError, match=r"normal_loss: expected.*\(2, 2, 6, 7\)"):  # not 3 channels, both alike
        normal_loss(target[:, :2], target[:, :2], mask)


def test_normal_hand_value():
    # 1x2 image: pixel 0 pred (2, 0, 0) vs target (0, 0, 1) (90 deg); pixel 1 exact (0, 0, 1)
    target = torch.tensor([0.0, 0.0, 1.0]).view(1, 3, 1, 1).expand(1, 3, 1, 2).clone()
    pred = target.clone()
    pred[0, :, 0, 0] = torch.tensor([2.0, 0.0, 0.0])
    out = normal_loss(pred, target, None)
    assert out["cos"].item() == pytest.approx(0.5)  # (1 + 0) / 2
    assert out["l1"].item() == pytest.approx((2 + 1) / 2)  # |2| + |-1| summed over channels, over 2 pixels
    # one x-pair, no y-pair: raw diff (-2, 0, 1) vs (0, 0, 0) -> 4 + 0 + 1 summed over channels
    assert out["grad"].item() == pytest.approx(5.0)
    assert out["loss"].item() == pytest.approx(10 * 0.5 + 1.5 + 10 * 5.0)


# ------------------------------------------------------------------- pointmap
def test_pointmap_minimum_grad_and_mask():
    target = _pointmap()
    mask = torch.ones(2, 1, 8, 8, dtype=torch.bool)
    mask[:, :, :2] = False
    target = target * mask  # targets are 0 outside the mask (as the data and upstream make them)
    out = pointmap_loss(target.clone(), target, mask, torch.tensor([1.5, 2.0]), torch.tensor([1.5, 2.0]))
    assert set(out) == {"l1", "multiscale_l1", "shift_invariant_l1", "silog", "normal", "scale", "loss"}  # no K given
    assert out["loss"].item() < 1e-5
    pred = (target + 0.2 * torch.randn(target.shape, generator=_gen(5))).requires_grad_(True)
    scale = torch.tensor([1.0, 3.0], requires_grad=True)
    out = pointmap_loss(pred, target, mask, scale, torch.tensor([1.5, 2.0]))
    assert out["loss"] > 0
    _assert_finite_grad(out["loss"], pred, scale)
    # NaN in the target's invalid rows 0-1 changes nothing
    changed_tgt = target.clone()
    changed_tgt[:, :, :2] = float("nan")
    a = pointmap_loss(pred.detach(), target, mask)
    pred_again = pred.detach().clone().requires_grad_(True)
    b = pointmap_loss(pred_again, changed_tgt, mask[:, 0])
    for k in a:
        torch.testing.assert_close(a[k], b[k].detach())
    _assert_finite_grad(b["loss"], pred_again)  # NaN targets reach no gradient either
    # the prediction in the invalid rows reaches only the multiscale term: as upstream, bilinear upsampling
    # mixes row 1 into the border row 2
    changed_pred = pred.detach().clone()
    changed_pred[:, :, :2] = 9.0
    c = pointmap_loss(changed_pred, target, mask)
    for k in a:
        if k not in ("multiscale_l1", "loss"):
            torch.testing.assert_close(a[k], c[k])
    assert c["multiscale_l1"] > a["multiscale_l1"]


def test_pointmap_hand_value_and_clamp():
    # flat plane at depth 2 (mean GT depth 2); prediction shifted by (0.2, 0, 0) metres
    target = torch.zeros(1, 3, 4, 4)
    target[:, 2] = 2.0
    pred = target.clone()
    pred[:, 0] += 0.2
    out = pointmap_loss(pred, target, None)
    assert out["l1"].item() == pytest.approx(0.1)  # 0.2 / 2, summed over the channels
    assert out["multiscale_l1"].item() == pytest.approx(0.1)
    assert out["shift_invariant_l1"].item() == pytest.approx(0.0, abs=1e-6)
    assert out["silog"].item() == pytest.approx(0.0, abs=1e-6)
    assert out["normal"].item() == pytest.approx(0.0, abs=1e-6)
    assert out["loss"].item() == pytest.approx(2 * 0.1 + 0.1, rel=1e-5)
    far = pointmap_loss(target + torch.tensor([100.0, 0, 0]).view(1, 3, 1, 1), target, None)
    assert far["l1"].item() == pytest.approx(50.0)  # logged unclamped
    assert far["loss"].item() == pytest.approx(4.0 + 4.0, rel=1e-5)  # 2 x 50 and 1 x 50, each clamped at 4
    with pytest.raises(ValueError, match="unknown weight"):
        pointmap_loss(pred, target, None, weights={"nope": 1.0})
    with pytest.raises(ValueError, match="needs target_scale"):
        pointmap_loss(pred, target, None, pred_scale=torch.ones(1))


# -------------------------------------------------------------------- matting
def _matting_inputs(seed=0, h=8, w=8):
    g = _gen(seed)
    alpha = torch.rand(2, 1, h, w, generator=g)
    fg, bg = torch.rand(2, 3, h, w, generator=g), torch.rand(2, 3, h, w, generator=g)
    return alpha, fg, bg, alpha * fg + (1 - alpha) * bg


def test_matting_minimum_grad_and_mask():
    alpha_gt, fg_gt, bg, image = _matting_inputs()
    weights = {"laplacian": 1.0}
    out = matting_loss(alpha_gt.clone(), fg_gt.clone(), alpha_gt, fg_gt, image, bg, weights=weights)
    assert set(out) == {"alpha", "composition", "foreground", "gradient", "laplacian", "loss"}
    assert out["loss"].item() < 1e-6
    alpha = torch.rand(2, 1, 8, 8, generator=_gen(1), requires_grad=True)
    fg = torch.rand(2, 3, 8, 8, generator=_gen(2), requires_grad=True)
    out = matting_loss(alpha, fg, alpha_gt, fg_gt, image, bg, weights=weights)
    _assert_finite_grad(out["loss"], alpha, fg)
    # unknown region = left half; change pixels two or more columns away from it
    mask = torch.zeros(2, 8, 8, dtype=torch.bool)
    mask[..., :4] = True
    a = matting_loss(alpha.detach(), fg.detach(), alpha_gt, fg_gt, image, bg, mask, weights)
    alpha2, fg2 = alpha.detach().clone(), fg.detach().clone()
    alpha2[..., 5:], fg2[..., 4:] = 0.123, 0.9
    b = matting_loss(alpha2, fg2, alpha_gt, fg_gt, image, bg, mask, weights)
    for k in a:
        torch.testing.assert_close(a[k], b[k])
    no_bg = matting_loss(alpha.detach(), fg.detach(), alpha_gt, fg_gt, image)
    assert "composition" not in no_bg and "laplacian" not in no_bg


def test_matting_hand_value():
    alpha_gt = torch.tensor([[[[0.0, 1.0]]]])
    alpha = torch.tensor([[[[0.5, 1.0]]]])
    fg_gt = torch.ones(1, 3, 1, 2)
    fg = fg_gt.clone()
    fg[:, :, :, 0] = 0.0  # differs only where alpha_gt == 0: ignored by the foreground term
    bg = torch.zeros(1, 3, 1, 2)
    image = alpha_gt * fg_gt + (1 - alpha_gt) * bg
    out = matting_loss(alpha, fg, alpha_gt, fg_gt, image, bg)
    assert out["alpha"].item() == pytest.approx(0.25)
    assert out["composition"].item() == pytest.approx(0.0)  # 0.5 * F(=0) + 0.5 * 0 = 0
    assert out["foreground"].item() == pytest.approx(0.0)
    # Sobel x (/8, replicate pad) of [a0, a1] is 4 (a1 - a0) / 8 at both pixels: 0.25 (pred) vs 0.5 (GT);
    # y-gradients are 0 -> mean over 2 pixels x 2 directions of |diff| = (0.25 + 0.25) / 4
    assert out["gradient"].item() == pytest.approx(0.125)
    fg[:, :, :, 1] = 0.5  # and now wrong where alpha_gt > 0: 0.5 on that pixel's three channels
    assert matting_loss(alpha, fg, alpha_gt, fg_gt, image, bg)["foreground"].item() == pytest.approx(0.5)
    with pytest.raises(ValueError, match="matting_loss: expected alpha"):  # two channels, both alike
        matting_loss(alpha.expand(1, 2, 1, 2), fg, alpha_gt.expand(1, 2, 1, 2), fg_gt, image, bg)


def test_laplacian_pyramid_levels_and_loss_hand_value():
    """Bands until a side would drop below 2, then the low-pass residual; a constant map has no band (the blur keeps
    constants), so a constant offset c costs only at the residual: 2^(levels - 1) c."""
    from sapiens2_ft.tasks.matting.loss import laplacian_loss, laplacian_pyramid

    assert [tuple(x.shape[-2:]) for x in laplacian_pyramid(torch.rand(1, 1, 4, 4))] == [(4, 4), (2, 2), (1, 1)]
    assert [tuple(x.shape[-2:]) for x in laplacian_pyramid(torch.rand(1, 1, 32, 32))] == [
        (32, 32), (16, 16), (8, 8), (4, 4), (2, 2)]
    *bands, residual = laplacian_pyramid(torch.full((1, 1, 32, 32), 0.3))
    assert all(b.abs().max() < 1e-6 for b in bands) and torch.allclose(residual, torch.tensor(0.3))
    alpha = torch.rand(1, 1, 64, 64, generator=_gen(4))
    assert laplacian_loss(alpha + 0.1, alpha).item() == pytest.approx(16 * 0.1, rel=1e-4)


def test_intrinsics_consistency_zero_for_canonical_points_and_hand_value():
    import numpy as np

    from datamodules.dense.geometry import canonical_pointmap
    from sapiens2_ft.tasks.pointmap.loss import intrinsics_consistency

    K = np.array([[300.0, 0, 4.5], [0, 320.0, 3.0], [0, 0, 1]])
    depth = 2.0 + np.random.default_rng(0).random((6, 8))
    xyz, scale = canonical_pointmap(depth, K, 768.0)
    points = torch.from_numpy(xyz).permute(2, 0, 1)[None]
    Ks = torch.from_numpy(K)[None].float()
    mask = torch.ones(1, 1, 6, 8)
    assert intrinsics_consistency(points, Ks, mask).item() == pytest.approx(0.0, abs=1e-5)
    shifted = points.clone()
    shifted[:, 0] += 0.1 * shifted[:, 2]  # X off by 0.1 Z (canonical metres) everywhere, Y exact
    expected = 0.1 * scale * depth.mean()
    assert intrinsics_consistency(shifted, Ks, mask).item() == pytest.approx(expected, rel=1e-4)
    out = pointmap_loss(shifted, points, mask, intrinsics=Ks)
    assert out["intrinsics"].item() == pytest.approx(expected, rel=1e-4)


def test_estimate_background_inverts_the_composite():
    from sapiens2_ft.tasks.matting.loss import estimate_background

    alpha, fg, bg, image = _matting_inputs()
    alpha = alpha.clamp(max=0.95)
    image = alpha * fg + (1 - alpha) * bg
    torch.testing.assert_close(estimate_background(image, alpha, fg), bg, atol=1e-4, rtol=0)
    opaque = torch.ones_like(alpha)
    torch.testing.assert_close(estimate_background(image, opaque, fg), image)
    # (1 - 0.5 x 0) / 0.5 = 2: a background is a colour, clamped to [0, 1]
    bright = estimate_background(torch.ones(1, 3, 1, 1), torch.full((1, 1, 1, 1), 0.5), torch.zeros(1, 3, 1, 1))
    assert bright.max() == 1


def test_matting_samples_without_foreground_skip_fg_terms():
    alpha_gt, fg_gt, bg, image = _matting_inputs()
    alpha = torch.rand(2, 1, 8, 8, generator=_gen(1))
    fg = torch.rand(2, 3, 8, 8, generator=_gen(2))
    has = torch.tensor([True, False])
    a = matting_loss(alpha, fg, alpha_gt, fg_gt, image, bg, has_foreground=has)
    fg_gt2, bg2 = fg_gt.clone(), bg.clone()
    fg_gt2[1], bg2[1] = 0.0, 0.7  # unknown for sample 1: must not matter
    b = matting_loss(alpha, fg, alpha_gt, fg_gt2, image, bg2, has_foreground=has)
    for k in a:
        torch.testing.assert_close(a[k], b[k])
    full = matting_loss(alpha, fg, alpha_gt, fg_gt, image, bg)
    torch.testing.assert_close(a["alpha"], full["alpha"])
    assert a["foreground"] != full["foreground"]
    first = matting_loss(alpha[:1], fg[:1], alpha_gt[:1], fg_gt[:1], image[:1], bg[:1])  # the one that has them
    for k in ("composition", "foreground"):
        torch.testing.assert_close(a[k], first[k])
