"""Parity of the albedo loss and metrics with upstream Sapiens2 (3098c14), and their values by hand.

The references are re-derived from upstream's formulas (``dense/src/models/losses/{l1_loss,albedo_loss}.py``,
``dense/src/evaluators/albedo_evaluator.py``) independently of the project's code: the loss terms as upstream
writes them on the full tensors, the evaluator as a loop over samples in float64 numpy with SciPy's correlation
(zero padding) for the SSIM windows.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import ndimage

from sapiens2_ft.tasks.albedo.loss import albedo_loss
from sapiens2_ft.tasks.albedo.metric import AlbedoMetrics
from sapiens2_ft.tasks.albedo.module import AlbedoModule


def _maps(seed: int, b: int = 3, h: int = 24, w: int = 20):
    """A raw prediction (partly outside [0, 1], as an untrained head's), an albedo target and a mask with a hole
    and one sample of few valid pixels."""
    g = torch.Generator().manual_seed(seed)
    target = torch.rand(b, 3, h, w, generator=g)
    pred = target + 0.3 * torch.randn(b, 3, h, w, generator=g)
    mask = torch.rand(b, 1, h, w, generator=g) > 0.3
    mask[0, :, 5:12, 4:15] = False
    mask[-1] = False
    mask[-1, :, 2:5, 3:9] = True
    target = torch.where(mask, target, torch.nan)  # invalid pixels may hold anything
    return pred, target, mask


# ------------------------------------------------------------------------------------------------ references
def upstream_l1(pred, target, mask):
    """``L1Loss``: |pred - target| times the (B, 1, H, W) mask, summed, over the mask's sum (clamped at 1)."""
    loss = (pred - target).abs() * mask
    return torch.nan_to_num(loss, nan=0.0).sum() / mask.sum().clamp(min=1)


def upstream_grad(pred, target, mask):
    """``AlbedoGradL1Loss``: (MSE of x-differences over x-pairs + that of y) x 0.5, each summed over channels."""
    pdx, pdy = pred[:, :, :, 1:] - pred[:, :, :, :-1], pred[:, :, 1:, :] - pred[:, :, :-1, :]
    tdx, tdy = target[:, :, :, 1:] - target[:, :, :, :-1], target[:, :, 1:, :] - target[:, :, :-1, :]
    mdx, mdy = mask[:, :, :, :-1] * mask[:, :, :, 1:], mask[:, :, :-1, :] * mask[:, :, 1:, :]
    ldx = torch.nan_to_num((pdx - tdx) ** 2 * mdx, nan=0.0).sum() / mdx.sum().clamp(min=1)
    ldy = torch.nan_to_num((pdy - tdy) ** 2 * mdy, nan=0.0).sum() / mdy.sum().clamp(min=1)
    return (ldx + ldy) * 0.5


def upstream_chroma(pred, target, mask, eps=1e-6):
    """``AlbedoChromaticityL1Loss``: the prediction clamped to [0, 1]; chroma = RGB / (R + G + B + eps)."""
    p = pred.clamp(0, 1)
    pc, gc = p / (p.sum(1, keepdim=True) + eps), target / (target.sum(1, keepdim=True) + eps)
    return torch.nan_to_num((pc - gc).abs() * mask, nan=0.0).sum() / mask.sum().clamp(min=1)


def upstream_evaluator(preds: np.ndarray, targets: np.ndarray, masks: np.ndarray) -> dict[str, float]:
    """``AlbedoEvaluator.process`` per sample, then ``evaluate``: (B, 3, H, W) maps, (B, H, W) bool masks."""
    ax = np.arange(11) - 5.0
    xx, yy = np.meshgrid(ax, ax, indexing="xy")
    kernel = np.exp(-(xx * xx + yy * yy) / (2 * 1.5 * 1.5))
    kernel /= kernel.sum()
    c1, c2 = 0.01**2, 0.03**2
    totals = np.zeros(7)
    for pr, gt, mask in zip(preds.astype(np.float64), targets.astype(np.float64), masks):
        if not mask.any():
            continue
        gt = np.where(mask, gt, 0.0)
        diff = pr - gt
        l1, l2 = np.abs(diff).mean(0), (diff * diff).mean(0)
        mask_h, mask_v = mask[:, 1:] & mask[:, :-1], mask[1:, :] & mask[:-1, :]
        grad_h = np.abs((pr[:, :, 1:] - pr[:, :, :-1]) - (gt[:, :, 1:] - gt[:, :, :-1])).mean(0)
        grad_v = np.abs((pr[:, 1:, :] - pr[:, :-1, :]) - (gt[:, 1:, :] - gt[:, :-1, :])).mean(0)
        m = mask.astype(np.float64)

        def conv(z):
            return ndimage.correlate(z, kernel, mode="constant", cval=0.0)

        m_conv = np.maximum(conv(m), 1e-8)
        ssim = []
        for x, y in zip(pr, gt):
            mu_x, mu_y = conv(x * m) / m_conv, conv(y * m) / m_conv
            sx = conv(x * x * m) / m_conv - mu_x**2
            sy = conv(y * y * m) / m_conv - mu_y**2
            sxy = conv(x * y * m) / m_conv - mu_x * mu_y
            ssim.append((2 * mu_x * mu_y + c1) * (2 * sxy + c2) / ((mu_x**2 + mu_y**2 + c1) * (sx + sy + c2) + 1e-8))
        window = m_conv > 0.5
        totals += [l1[mask].sum(), l2[mask].sum(), mask.sum(), grad_h[mask_h].sum() + grad_v[mask_v].sum(),
                   mask_h.sum() + mask_v.sum(), np.mean(ssim, axis=0)[window].sum(), window.sum()]
    mse = max(totals[1] / totals[2], 1e-12)
    return {"mae": totals[0] / totals[2], "rmse": math.sqrt(mse), "psnr": 10 * math.log10(1.0 / mse),
            "ssim": totals[5] / max(totals[6], 1), "grad_l1": totals[3] / max(totals[4], 1)}


# ------------------------------------------------------------------------------------------------ the loss
@pytest.mark.parametrize("seed", [0, 1])
def test_loss_terms_equal_upstreams(seed):
    pred, target, mask = _maps(seed)
    m = mask.float()
    terms = albedo_loss(pred, target, mask)
    expected = {"l1": upstream_l1(pred, target, m), "grad": upstream_grad(pred, target, m),
                "chroma": upstream_chroma(pred, target, m)}
    for name, value in expected.items():
        assert terms[name].item() == pytest.approx(value.item(), rel=1e-5), name
    total = 2 * expected["l1"] + 2 * expected["grad"] + expected["chroma"]  # the weights of upstream's configs
    assert terms["loss"].item() == pytest.approx(total.item(), rel=1e-5)


def test_loss_by_hand():
    """A prediction 0.1 too bright everywhere: L1 sums the three channels (0.3), the differences and the chroma
    of a grey target are unchanged (0, 0); twice as bright keeps the chroma, clamping at 1 changes it."""
    target = torch.full((1, 3, 4, 5), 0.4)
    terms = albedo_loss(target + 0.1, target, None)
    assert terms["l1"].item() == pytest.approx(0.3) and terms["grad"].item() == pytest.approx(0.0, abs=1e-7)
    assert terms["chroma"].item() == pytest.approx(0.0, abs=1e-6)
    coloured = torch.tensor([0.2, 0.3, 0.45]).view(1, 3, 1, 1).expand(1, 3, 4, 5)
    assert albedo_loss(2 * coloured, coloured, None)["chroma"].item() == pytest.approx(0.0, abs=1e-5)
    assert albedo_loss(3 * coloured, coloured, None)["chroma"].item() > 0.1  # 1.35 clamped to 1
    ramp = torch.linspace(0, 0.5, 5).view(1, 1, 1, 5).expand(1, 3, 4, 5)  # x-differences 0.125 per channel
    assert albedo_loss(ramp * 0, ramp, None)["grad"].item() == pytest.approx(0.5 * 3 * 0.125**2)


def test_loss_weights_and_gradients():
    pred, target, mask = _maps(2)
    pred.requires_grad_(True)
    terms = albedo_loss(pred, target, mask, l1_weight=1.0, grad_weight=0.0, chroma_weight=3.0)
    assert terms["loss"].item() == pytest.approx((terms["l1"] + 3 * terms["chroma"]).item())
    terms["loss"].backward()
    assert torch.isfinite(pred.grad).all() and (pred.grad[~mask.expand_as(pred)] == 0).all()
    with pytest.raises(ValueError, match=r"albedo_loss: expected pred and target \(B, 3, H, W\)"):
        albedo_loss(pred[:, :1], target[:, :1], mask)


def test_negative_weights_are_config_problems():
    assert AlbedoModule.check_options(size="tiny", grad_weight=-1.0, chroma_weight=-0.5) == [
        "model.grad_weight: -1.0 is negative", "model.chroma_weight: -0.5 is negative"]


# ------------------------------------------------------------------------------------------------ the metrics
def test_metrics_equal_upstreams_evaluator_over_batches():
    metric = AlbedoMetrics()
    preds, targets, masks = [], [], []
    for seed in (3, 4):  # two validation batches: the sums carry across
        pred, target, mask = _maps(seed)
        metric.update(pred, target, mask)
        preds.append(pred), targets.append(target), masks.append(mask[:, 0])
    got = {k: v.item() for k, v in metric.compute().items()}
    want = upstream_evaluator(torch.cat(preds).numpy(), torch.cat(targets).nan_to_num().numpy(),
                              torch.cat(masks).numpy())
    assert got == pytest.approx(want, rel=1e-5)
    assert int(metric.error_counts.sum()) == int(torch.cat(masks).sum())


def test_metrics_by_hand():
    """Perfect: error 0, SSIM 1; 0.1 too bright: MAE = RMSE = 0.1, PSNR = 20 dB, gradients untouched."""
    target = torch.rand(2, 3, 16, 16, generator=torch.Generator().manual_seed(5)) * 0.8
    perfect, offset = AlbedoMetrics(), AlbedoMetrics()
    perfect.update(target, target)
    offset.update(target + 0.1, target)
    p, o = perfect.compute(), offset.compute()
    assert p["mae"].item() == 0 and p["ssim"].item() == pytest.approx(1.0, abs=1e-6)
    assert o["mae"].item() == pytest.approx(0.1) and o["rmse"].item() == pytest.approx(0.1)
    assert o["psnr"].item() == pytest.approx(20.0, abs=1e-4) and o["grad_l1"].item() == pytest.approx(0, abs=1e-6)
    assert 0 < o["ssim"].item() < 1


def test_grey_start_makes_a_new_head_predict_mid_grey():
    """``model.grey_start``: a new head's first output is 0.5 everywhere; upstream's random head's is far outside
    [0, 1]. (A loaded head keeps its weights: ``test_albedo_apps`` evaluates an export under the demo recipe, which
    sets grey_start, and gets the run's metrics.)"""
    x = torch.randn(2, 3, 64, 48, generator=torch.Generator().manual_seed(0))
    outputs = {}
    for grey in (False, True):
        torch.manual_seed(0)
        module = AlbedoModule(size="tiny", input_size=(64, 48), grey_start=grey)
        module.configure_model()
        with torch.no_grad():
            outputs[grey] = module.predict(x, size=(64, 48))["albedo"]
        assert ("mid-grey" in str(module.load_report)) == grey
    assert torch.equal(outputs[True], torch.full_like(outputs[True], 0.5))
    assert outputs[False].abs().max() > 1
