"""Tests for the dense-task metrics: hand values and independence from how updates are batched."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from sapiens2_ft.tasks.matting.metric import MattingMetrics
from sapiens2_ft.tasks.matting.metric import connectivity_error, gaussian_derivative_kernel, gradient_magnitude
from sapiens2_ft.tasks.normal.metric import NormalMetrics
from sapiens2_ft.tasks.pointmap.metric import PointmapMetrics
from sapiens2_ft.tasks.seg.metric import SegmentationMetrics


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _split_equal(make, *tensors) -> None:
    """One update with the whole batch == two updates with its halves."""
    whole, halves = make(), make()
    whole.update(*tensors)
    halves.update(*(t[:1] if t is not None else None for t in tensors))
    halves.update(*(t[1:] if t is not None else None for t in tensors))
    a, b = whole.compute(), halves.compute()
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(a[k], b[k], msg=k)


# --------------------------------------------------------------- segmentation
def test_segmentation_perfect_and_hand_confusion():
    labels = torch.randint(0, 3, (2, 4, 5), generator=_gen())
    m = SegmentationMetrics(num_classes=4)  # class 3 absent everywhere: excluded
    m.update(labels, labels)
    out = m.compute()
    assert out["mIoU"].item() == 1.0 and out["mAcc"].item() == 1.0 and out["aAcc"].item() == 1.0

    # GT [0 0 1 1 255], pred [0 1 1 2 0]; class 2 only predicted
    gt = torch.tensor([[[0, 0, 1, 1, 255]]])
    pred = torch.tensor([[[0, 1, 1, 2, 0]]])
    m = SegmentationMetrics(num_classes=4)
    m.update(pred, gt)
    out = m.compute()
    # IoU: c0 1/2, c1 1/3, c2 0/1; class 3 absent -> mean of three
    assert out["mIoU"].item() == pytest.approx((1 / 2 + 1 / 3 + 0) / 3)
    assert out["mAcc"].item() == pytest.approx((1 / 2 + 1 / 2) / 2)  # classes with GT only
    assert out["aAcc"].item() == pytest.approx(2 / 4)
    assert torch.isnan(m.per_class_iou[3])
    rows = m.diagnostics().tables["per_class"].rows
    assert [row[3] for row in rows] == [0.5, 0.5, None, None]  # recall: undefined without ground truth

    m.update(torch.tensor([[[3]]]), torch.tensor([[[3]]]))  # one pixel of class 3, right
    out = m.compute()
    assert out["mIoU"].item() == pytest.approx((1 / 2 + 1 / 3 + 0 + 1) / 4)
    assert out["mAcc"].item() == pytest.approx((1 / 2 + 1 / 2 + 1) / 3)
    assert out["aAcc"].item() == pytest.approx(3 / 5)

    single = SegmentationMetrics(num_classes=2)  # one labelled pixel is enough to score
    single.update(torch.tensor([[[1, 0]]]), torch.tensor([[[1, 255]]]))
    assert all(v.item() == 1.0 for v in single.compute().values())
    with pytest.warns(UserWarning, match="before the ``update``"):  # torchmetrics' own warning
        empty = SegmentationMetrics(num_classes=4).compute()  # nothing seen gives 0, not NaN
    assert all(v.item() == 0.0 for v in empty.values())


def test_segmentation_logits_split_and_errors():
    labels = torch.randint(0, 3, (2, 4, 5), generator=_gen())
    labels[0, 0] = 255
    logits = torch.randn(2, 3, 4, 5, generator=_gen(1))
    _split_equal(lambda: SegmentationMetrics(3), logits, labels)
    with pytest.raises(ValueError, match="class ids"):
        SegmentationMetrics(2).update(labels, labels)
    for wrong in ("preds", "target"):  # an id equal to num_classes is out of range too
        pred, target = labels.clamp(max=2), labels.clamp(max=2)
        (pred if wrong == "preds" else target)[0, 1, 1] = 3
        with pytest.raises(ValueError, match="class ids"):
            SegmentationMetrics(3).update(pred, target)


# --------------------------------------------------------------------- normal
def test_normal_ninety_degrees():
    target = torch.tensor([0.0, 0.0, 1.0]).view(1, 3, 1, 1).expand(2, 3, 3, 3)
    pred = torch.tensor([0.0, 2.0, 0.0]).view(1, 3, 1, 1).expand(2, 3, 3, 3)
    m = NormalMetrics()
    m.update(pred, target)
    out = m.compute()
    assert out["angle_mean"].item() == pytest.approx(90.0)
    assert out["angle_rmse"].item() == pytest.approx(90.0)
    assert out["angle_median"].item() == pytest.approx(90.0, abs=0.01)
    assert out["within_30"].item() == 0.0


def test_normal_hand_values_mask_and_split():
    # angles 0, 10, 20, 40 deg (plus one masked pixel at 90)
    angles = torch.deg2rad(torch.tensor([0.0, 10.0, 20.0, 40.0, 90.0], dtype=torch.float64))
    pred = torch.stack([torch.sin(angles), torch.zeros(5, dtype=torch.float64), torch.cos(angles)]).view(1, 3, 1, 5)
    target = torch.tensor([0.0, 0.0, 1.0], dtype=torch.float64).view(1, 3, 1, 1).expand(1, 3, 1, 5)
    mask = torch.tensor([[[True, True, True, True, False]]])
    m = NormalMetrics()
    m.update(pred, target, mask)
    out = m.compute()
    assert out["angle_mean"].item() == pytest.approx(17.5)
    assert out["angle_rmse"].item() == pytest.approx(np.sqrt((0 + 100 + 400 + 1600) / 4))
    assert out["angle_median"].item() == pytest.approx(10.0, abs=0.01)  # lower median (2nd of 4)
    assert [out[f"within_{t}"].item() for t in ("5", "11.25", "22.5", "30")] == pytest.approx([25, 50, 75, 75])
    pred = torch.randn(2, 3, 5, 6, generator=_gen(1))
    target = F.normalize(torch.randn(2, 3, 5, 6, generator=_gen(2)), dim=1)
    _split_equal(NormalMetrics, pred, target, torch.rand(2, 5, 6, generator=_gen(3)) > 0.2)


def test_normal_extremes_of_one_pixel_and_an_empty_batch():
    """0 and 180 degrees land in the first and last 0.01-degree bins (medians 0.005 and 179.995); a batch whose
    pixels are all masked adds nothing."""
    up = torch.tensor([0.0, 0.0, 1.0], dtype=torch.float64).view(1, 3, 1, 1)
    for pred, mean, median, within in ((up, 0.0, 0.005, 100.0), (-up, 180.0, 179.995, 0.0)):
        m = NormalMetrics()
        m.update(pred.expand(1, 3, 2, 2), up.expand(1, 3, 2, 2), torch.zeros(1, 2, 2, dtype=torch.bool))  # masked
        m.update(pred, up)
        out = m.compute()
        assert (out["angle_mean"].item(), out["angle_rmse"].item()) == pytest.approx((mean, mean), abs=1e-6)
        assert out["angle_median"].item() == pytest.approx(median, abs=1e-9)
        assert out["within_5"].item() == out["within_30"].item() == within
        rows = m.diagnostics().tables["angle_error"].rows  # 1-degree bins over [0, 180]
        assert len(rows) == 180 and rows[-1][1] == 180.0 and sum(row[2] for row in rows) == 1


# ------------------------------------------------------------------- pointmap
def test_pointmap_constant_offset():
    ys, xs = torch.meshgrid(torch.linspace(-1, 1, 6), torch.linspace(-1, 1, 6), indexing="ij")
    target = torch.stack([xs, ys, 3.0 + 0.2 * xs * ys]).unsqueeze(0).expand(2, 3, 6, 6).double()
    pred = target + torch.tensor([0.06, 0.0, 0.08], dtype=torch.float64).view(1, 3, 1, 1)  # |offset| = 0.1 m
    mask = torch.ones(2, 6, 6, dtype=torch.bool)
    mask[:, 0, 0] = False
    m = PointmapMetrics()
    m.update(pred, target, mask)
    out = m.compute()
    assert out["l2"].item() == pytest.approx(0.1)
    assert out["rmse"].item() == pytest.approx(0.1)
    assert [out["mae_x"].item(), out["mae_y"].item(), out["mae_z"].item()] == pytest.approx([0.06, 0.0, 0.08])
    assert out["within_20cm"].item() == 100.0 and out["within_5cm"].item() == 0.0
    assert out["normal_angle"].item() == pytest.approx(0.0, abs=1e-4)  # a shift keeps the normals
    noisy = target + 0.05 * torch.randn(target.shape, generator=_gen(4), dtype=torch.float64)
    _split_equal(PointmapMetrics, noisy, target, mask)
    with pytest.raises(ValueError, match="PointmapMetrics: expected"):  # 2 channels, both alike
        m.update(pred[:, :2], target[:, :2])


def test_pointmap_normal_angle_of_a_tilted_plane():
    """A flat target (normal along z) and a prediction turned 30 degrees about y: 30 degrees wherever both normals
    exist; the pixels next to a masked one have none and are left out."""
    ys, xs = torch.meshgrid(torch.linspace(-1, 1, 5), torch.linspace(-1, 1, 5), indexing="ij")
    target = torch.stack([xs, ys, torch.full_like(xs, 3.0)]).unsqueeze(0).double()
    pred = torch.stack([xs, ys, 3.0 + np.tan(np.deg2rad(30.0)) * xs]).unsqueeze(0).double()
    mask = torch.ones(1, 5, 5, dtype=torch.bool)
    mask[0, 2, 2] = False
    m = PointmapMetrics()
    m.update(pred, target, mask)
    assert m.compute()["normal_angle"].item() == pytest.approx(30.0, abs=1e-4)
    assert 0 < m.normal_count < mask.sum()


def test_pointmap_predicted_focal_and_canonical_units():
    """A prediction right in the canonical camera but 20% off in its focal: the L2 by the image's own focal is 0
    (upstream's comparison), ``l2_predicted_focal`` the depth error the wrong focal makes (every point scaled by
    1 / 1.2); ``l2_canonical`` is the L2 times each image's scale. Without their inputs the keys are absent."""
    ys, xs = torch.meshgrid(torch.linspace(-1, 1, 4), torch.linspace(-1, 1, 4), indexing="ij")
    target = torch.stack([xs, ys, 3.0 + 0.0 * xs]).unsqueeze(0).expand(2, 3, 4, 4).double()
    off = target + torch.tensor([0.0, 0.0, 0.1], dtype=torch.float64).view(1, 3, 1, 1)  # 10 cm deeper
    m = PointmapMetrics()
    m.update(off, target, None, predicted_focal=target / 1.2, scale=torch.tensor([2.0, 3.0]))
    out = m.compute()
    expected = (target - target / 1.2).pow(2).sum(1).sqrt().mean().item()
    assert out["l2"].item() == pytest.approx(0.1)
    assert out["l2_predicted_focal"].item() == pytest.approx(expected) and expected > 0.4
    assert out["l2_canonical"].item() == pytest.approx(0.1 * (2.0 + 3.0) / 2)  # equal pixel counts per image
    offset = PointmapMetrics()  # the predicted focal's points 5 cm off along z
    offset.update(target, target, None, predicted_focal=target + torch.tensor([0.0, 0.0, 0.05]).view(1, 3, 1, 1))
    assert offset.compute()["l2_predicted_focal"].item() == pytest.approx(0.05)
    plain = PointmapMetrics()
    plain.update(off, target)
    assert not {"l2_predicted_focal", "l2_canonical"} & set(plain.compute())
    with pytest.raises(ValueError, match="predicted_focal"):
        m.update(off, target, None, predicted_focal=target[..., :2])


# -------------------------------------------------------------------- matting
def test_matting_hand_values_and_split():
    gt = torch.zeros(1, 1, 4, 4)
    gt[..., :, 2:] = 1.0
    m = MattingMetrics()
    m.update(gt.clone(), gt)
    perfect = m.compute()
    assert all(v.item() == pytest.approx(0.0) for v in perfect.values())

    pred = gt.clone()
    pred[..., 0, 0] = 0.5  # |err| 0.5
    pred[..., 1, 3] = 0.0  # |err| 1.0
    m = MattingMetrics()
    m.update(pred, gt)
    out = m.compute()
    assert out["sad"].item() == pytest.approx(1.5 / 1000)
    assert out["mse"].item() == pytest.approx((0.25 + 1.0) / 16)
    grad_error = gradient_magnitude(pred[0, 0].double().numpy()) - gradient_magnitude(gt[0, 0].double().numpy())
    assert out["grad"].item() == pytest.approx((grad_error**2).sum() / 1000) and out["grad"].item() > 0
    assert out["conn"].item() > 0
    mask = torch.ones(1, 4, 4, dtype=torch.bool)
    mask[0, 0, 0] = False  # (0, 0) out, (1, 3) in: only the error of 1.0 and 14 exact pixels are scored
    masked = MattingMetrics()
    masked.update(pred, gt, mask)
    scored = masked.compute()
    assert scored["sad"].item() == pytest.approx(1.0 / 1000)
    assert scored["mse"].item() == pytest.approx(1.0 / 15)
    assert int(masked.error_counts.sum()) == 15 and int(masked.error_counts[-1]) == 1  # the histogram's pixels too

    two = MattingMetrics()  # per-image values averaged over images: (1.5 + 0) / 2
    two.update(torch.cat([pred, gt]), torch.cat([gt, gt]))
    assert two.compute()["sad"].item() == pytest.approx(0.75 / 1000)

    batch_gt = torch.rand(2, 1, 12, 12, generator=_gen(1))
    batch_pred = (batch_gt + 0.2 * torch.randn(batch_gt.shape, generator=_gen(2))).clamp(0, 1)
    _split_equal(MattingMetrics, batch_pred, batch_gt)


def test_gradient_kernel_size_and_norm():
    # half size ceil(1.4 sqrt(-2 ln(sqrt(2 pi) 1.4 0.01))) = ceil(3.62) = 4: 9 x 9, unit L2 norm, odd in x, even in y
    kernel = gaussian_derivative_kernel(1.4)
    assert kernel.shape == (9, 9) and np.sum(kernel**2) == pytest.approx(1.0)
    np.testing.assert_allclose(kernel, -kernel[:, ::-1])
    np.testing.assert_allclose(kernel, kernel[::-1, :])
    assert kernel[4, 3] > 0 > kernel[4, 5]  # -u g(u): the derivative's sign
    assert np.unravel_index(np.abs(kernel).argmax(), kernel.shape) in ((4, 3), (4, 5))  # |u| g(u) peaks at 1 px


def test_connectivity_hand_value():
    # gt and pred agree except a pixel at 0.5 in pred that is disconnected from the GT blob
    gt = np.zeros((3, 5))
    gt[:, :2] = 1.0
    pred = gt.copy()
    pred[1, 4] = 0.5
    # that pixel leaves the largest component at t = 0.1 (it is not in gt >= t): l = 0,
    # phi_pred = 1 - 0.5 = 0.5, phi_gt = 1 - 0 = 1 -> 0.5 / 1000
    assert connectivity_error(pred, gt, np.ones_like(gt, dtype=bool)) == pytest.approx(0.5 / 1000)
    # A shallow dip inside the blob costs nothing (SAD 0.1 / 1000): it leaves at t = 1 with l = 0.9, d_pred = 0 and
    # d_gt = 0.1 < 0.15; the blob's other pixels never leave (l = 1).
    pred = gt.copy()
    pred[1, 0] = 0.9
    assert connectivity_error(pred, gt, np.ones_like(gt, dtype=bool)) == pytest.approx(0.0, abs=1e-12)
    # Two pixels apart from the blob leave at t = 0.1 (l = 0), so phi = 1 - alpha where alpha >= 0.15, else 1:
    # (0, 4) gt 0.2, pred 0.5 -> |0.5 - 0.8| = 0.3; (2, 4) gt 0, pred 0.15 (the threshold itself) -> 0.15.
    gt[0, 4], pred = 0.2, gt.copy()
    pred[0, 4], pred[2, 4] = 0.5, 0.15
    assert connectivity_error(pred, gt, np.ones_like(gt, dtype=bool)) == pytest.approx(0.45 / 1000)
