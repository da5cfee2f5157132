"""Pointmaps as upstream Sapiens2 and transformers have them: the canonical convention and every loss term.

The reference below retypes upstream's formulas (``dense/src/models/heads/pointmap_head.py`` ``loss()``,
``dense/src/models/losses/{pointmap_loss,l1_loss,silog_loss}.py``, weights from the pointmap configs'
``loss_decode``; REFERENCE.md section 7) as plain loops over samples and pixels in float64 numpy.
"""

from __future__ import annotations

import math

import cv2
import numpy as np
import pytest
import torch

from datamodules.dense.geometry import back_project, canonical_pointmap
from sapiens2_ft.tasks.dense_data import dense_targets
from sapiens2_ft.tasks.pointmap.loss import pointmap_loss
from sapiens2_ft.tasks.pointmap.module import PointmapModule, to_metric
from transformers_processor import processor_class

UPSTREAM_WEIGHTS = {"l1": 2.0, "multiscale_l1": 1.0, "shift_invariant_l1": 1.0, "silog": 1.0, "intrinsics": 1.0,
                    "normal": 2.0, "scale": 4.0}
UPSTREAM_CLAMPED = ("l1", "multiscale_l1", "shift_invariant_l1")  # clamp(weight x term, max=4) in the head


# ------------------------------------------------------------------ the upstream formulas, retyped
def _bilinear_up2(img: np.ndarray) -> np.ndarray:
    """(C, H, W) -> (C, 2H, 2W): half-pixel centres, source clamped at the edges (align_corners=False)."""
    c, h, w = img.shape
    out = np.zeros((c, 2 * h, 2 * w))
    for oy in range(2 * h):
        sy = max((oy + 0.5) / 2 - 0.5, 0.0)
        y0, fy = int(sy), sy - int(sy)
        y1 = min(y0 + 1, h - 1)
        for ox in range(2 * w):
            sx = max((ox + 0.5) / 2 - 0.5, 0.0)
            x0, fx = int(sx), sx - int(sx)
            x1 = min(x0 + 1, w - 1)
            top = (1 - fx) * img[:, y0, x0] + fx * img[:, y0, x1]
            bottom = (1 - fx) * img[:, y1, x0] + fx * img[:, y1, x1]
            out[:, oy, ox] = (1 - fy) * top + fy * bottom
    return out


def _pooled_l1(p: list, t: list, m: list) -> float:
    """Sum over every valid pixel of every sample of the 3-channel L1 sum, over the number of valid pixels."""
    total = count = 0.0
    for pb, tb, mb in zip(p, t, m):
        for i, j in zip(*np.nonzero(mb)):
            total += np.abs(pb[:, i, j] - tb[:, i, j]).sum()
            count += 1
    return total / max(count, 1.0)


def _normals(points: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Upstream compute_normals on one (3, H, W) map: right/down differences (reflect at the far border) x 100."""
    _, h, w = points.shape
    normals, exists = np.zeros_like(points), np.zeros((h, w), bool)
    for i in range(h):
        for j in range(w):
            right = j + 1 if j + 1 < w else w - 2
            down = i + 1 if i + 1 < h else h - 2
            dx = (points[:, i, right] - points[:, i, j]) * 100.0
            dy = (points[:, down, j] - points[:, i, j]) * 100.0
            n = np.cross(dx, dy)
            length = np.linalg.norm(n)
            if length > 1e-6 and mask[i, j]:
                normals[:, i, j], exists[i, j] = n / max(length, 1e-6), True
    return normals, exists


def upstream_terms(pred, target, mask, K, pred_scale, true_scale) -> dict[str, float]:
    """Upstream's pointmap loss terms (unweighted) and its total, one sample / pixel at a time."""
    pred, target = np.asarray(pred, np.float64), np.asarray(target, np.float64)
    mask, K = np.asarray(mask, bool).reshape(len(pred), *pred.shape[-2:]), np.asarray(K, np.float64)
    pred_scale, true_scale = np.asarray(pred_scale, np.float64), np.asarray(true_scale, np.float64)
    target = np.where(mask[:, None], target, 0.0)  # upstream's targets are 0 on invalid pixels
    batch = range(len(pred))
    mean_depth = [target[b, 2][mask[b]].mean() for b in batch]
    p = [pred[b] / mean_depth[b] for b in batch]
    t = [target[b] / mean_depth[b] for b in batch]
    out = {"l1": _pooled_l1(p, t, list(mask))}
    up_mask = [mask[b].repeat(2, axis=0).repeat(2, axis=1) for b in batch]  # nearest x2: dst // 2
    out["multiscale_l1"] = _pooled_l1([_bilinear_up2(x) for x in p], [_bilinear_up2(x) for x in t], up_mask)
    centred_p, centred_t = [], []
    for b in batch:
        n = mask[b].sum()
        centred_p.append(p[b] - (p[b] * mask[b]).sum(axis=(1, 2))[:, None, None] / (n + 1e-6))
        centred_t.append(t[b] - (t[b] * mask[b]).sum(axis=(1, 2))[:, None, None] / (n + 1e-6))
    out["shift_invariant_l1"] = _pooled_l1(centred_p, centred_t, list(mask))
    per_sample = []
    for b in batch:  # SiLog on the raw canonical Z
        d = [math.log(max(target[b, 2, i, j], 1e-4)) - math.log(max(pred[b, 2, i, j], 1e-4))
             for i, j in zip(*np.nonzero(mask[b]))]
        n = max(len(d), 1e-4)
        mean_sq, mean = sum(x * x for x in d) / n, sum(d) / n
        per_sample.append(math.sqrt(mean_sq - 0.5 * mean * mean))
    out["silog"] = sum(per_sample) / len(per_sample)
    total = count = 0.0
    for b in batch:  # intrinsics consistency on the raw canonical prediction, the image's K
        fx, fy, cx, cy = K[b, 0, 0], K[b, 1, 1], K[b, 0, 2], K[b, 1, 2]
        for i, j in zip(*np.nonzero(mask[b])):
            x, y, z = pred[b, :, i, j]
            total += abs(x - (j - cx) * z / fx) + abs(y - (i - cy) * z / fy)
            count += 1
    out["intrinsics"] = total / max(count, 1.0)
    total = count = 0.0
    for b in batch:  # normal consistency on pointmap / true scale, where the target's normal exists
        n_pred, _ = _normals(pred[b] / true_scale[b], mask[b])
        n_tgt, exists = _normals(target[b] / true_scale[b], mask[b])
        for i, j in zip(*np.nonzero(exists)):
            cos = min(max(float(n_pred[:, i, j] @ n_tgt[:, i, j]), -1.0), 1.0)
            total += (1 - cos) + np.abs(n_pred[:, i, j] - n_tgt[:, i, j]).mean()
            count += 1
    out["normal"] = total / max(count, 1.0)
    out["scale"] = float(np.mean([abs(a - b) for a, b in zip(pred_scale, true_scale)]))
    out["loss"] = sum(min(UPSTREAM_WEIGHTS[k] * v, 4.0) if k in UPSTREAM_CLAMPED else UPSTREAM_WEIGHTS[k] * v
                      for k, v in out.items())
    return out


# ------------------------------------------------------------------------------------- inputs
def _random_inputs(seed: int = 0, b: int = 2, h: int = 6, w: int = 5):
    """Random canonical targets (positive depth), a noisy prediction, a random mask, the images' K."""
    g = torch.Generator().manual_seed(seed)
    K = torch.zeros(b, 3, 3)
    K[:, 0, 0], K[:, 1, 1] = 3 + 4 * torch.rand(b, generator=g), 3 + 4 * torch.rand(b, generator=g)
    K[:, 0, 2], K[:, 1, 2], K[:, 2, 2] = w * torch.rand(b, generator=g), h * torch.rand(b, generator=g), 1.0
    z = 1.0 + 3.0 * torch.rand(b, 1, h, w, generator=g)
    target = torch.cat([torch.randn(b, 2, h, w, generator=g) * z, z], dim=1)
    pred = target + 0.3 * torch.randn(b, 3, h, w, generator=g)
    mask = torch.rand(b, 1, h, w, generator=g) > 0.3
    mask[:, :, 0, 0] = True
    true_scale = 0.5 + 2 * torch.rand(b, generator=g)
    pred_scale = true_scale + 0.2 * torch.randn(b, generator=g)
    return pred, torch.where(mask, target, 0.0), mask, K, pred_scale, true_scale


def five_percent_scene(seed: int = 0, h: int = 48, w: int = 36):
    """Two figures (an ellipsoid body in front of the camera), targets from depth + K via ``canonical_pointmap``,
    prediction = target x (1 + 0.05 N(0, 1)) per value, exact scales."""
    rng = np.random.default_rng(seed)
    targets, masks, Ks, scales = [], [], [], []
    for fx, depth_at in ((500.0, 2.5), (350.0, 3.5)):
        K = np.array([[fx, 0, (w - 1) / 2 + 1.5], [0, fx * 1.02, (h - 1) / 2 - 2.0], [0, 0, 1]])
        v, u = np.mgrid[0:h, 0:w]
        r2 = ((u - w / 2) / (0.35 * w)) ** 2 + ((v - h / 2) / (0.45 * h)) ** 2
        mask = r2 < 1
        depth = np.where(mask, depth_at - 0.25 * np.sqrt(np.clip(1 - r2, 0, 1)), 0.0)
        xyz, scale = canonical_pointmap(depth, K)
        targets.append(np.where(mask[..., None], xyz, 0).transpose(2, 0, 1))
        masks.append(mask[None])
        Ks.append(K)
        scales.append(scale)
    target = torch.from_numpy(np.stack(targets)).float()
    pred = target * (1 + 0.05 * torch.from_numpy(rng.standard_normal(target.shape)).float())
    scale = torch.tensor(scales, dtype=torch.float32)
    return pred, target, torch.from_numpy(np.stack(masks)), torch.tensor(np.stack(Ks), dtype=torch.float32), \
        scale.clone(), scale


def _ours(pred, target, mask, K, pred_scale, true_scale) -> dict[str, float]:
    out = pointmap_loss(pred, target, mask, pred_scale, true_scale, intrinsics=K)
    return {k: v.item() for k, v in out.items()}


# ----------------------------------------------------------------------------------- the loss
@pytest.mark.parametrize("seed", [0, 1])
def test_every_term_matches_upstream_on_random_tensors(seed):
    inputs = _random_inputs(seed)
    ours, ref = _ours(*inputs), upstream_terms(*inputs)
    assert set(ours) == set(ref)
    for name in ref:
        assert ours[name] == pytest.approx(ref[name], rel=1e-4, abs=1e-6), name


def test_clamp_is_on_the_weighted_batch_value():
    """A far-off sample raises the pooled L1 of the whole batch; upstream clamps 2 x L1 (the batch value) at 4."""
    pred, target, mask, K, ps, ts = _random_inputs(2)
    pred = pred.clone()
    pred[0] += 50.0 * target[0, 2:3].mean()
    ours, ref = _ours(pred, target, mask, K, ps, ts), upstream_terms(pred, target, mask, K, ps, ts)
    assert ref["l1"] > 2.0 and ours["l1"] == pytest.approx(ref["l1"], rel=1e-4)
    assert ours["loss"] == pytest.approx(ref["loss"], rel=1e-4)


def test_five_percent_scene_total_matches_upstream(capsys):
    inputs = five_percent_scene()
    ours, ref = _ours(*inputs), upstream_terms(*inputs)
    with capsys.disabled():
        print("\n5%-error scene   " + "  ".join(f"{k} {ours[k]:.4f} (upstream {ref[k]:.4f})" for k in ref))
    for name in ref:
        assert ours[name] == pytest.approx(ref[name], rel=1e-4, abs=1e-6), name


def test_samples_without_valid_pixels_change_nothing():
    """Upstream drops them in its data pipeline; here a sample with an empty mask leaves every pixel term as it was."""
    pred, target, mask, K, ps, ts = _random_inputs(3)
    empty = torch.zeros_like(mask[:1])
    padded = [torch.cat([x, x[:1]]) for x in (pred, target, K, ps, ts)]
    a = _ours(pred, target, mask, K, ps, ts)
    b = _ours(padded[0], padded[1], torch.cat([mask, empty]), *padded[2:])
    for name in ("l1", "multiscale_l1", "shift_invariant_l1", "silog", "intrinsics", "normal"):
        assert b[name] == pytest.approx(a[name], rel=1e-5), name


# ------------------------------------------------------------------------------- the convention
def test_round_trip_depth_and_K_to_canonical_to_metric():
    from datamodules.dense_dataset import to_item

    rng = np.random.default_rng(0)
    K = np.array([[612.0, 0, 90.3], [0, 598.0, 130.7], [0, 0, 1]])
    depth = (1.5 + 3.0 * rng.random((256, 192))).astype(np.float32)
    mask = rng.random((256, 192)) > 0.2
    camera = torch.from_numpy(back_project(depth, K)).permute(2, 0, 1)
    for source in ({"depth": depth}, {"pointmap": back_project(depth, K)}):
        item = to_item({"image": np.zeros((256, 192, 3), np.uint8), "K": K, "mask": mask, **source}, dense_targets("pointmap"))
        assert item["scale"].item() == pytest.approx(768.0 / 612.0)
        valid = torch.from_numpy(mask)
        upstream_target = camera * (768.0 / 612.0)  # X, Y and Z all times the scale
        torch.testing.assert_close(item["pointmap"][:, valid], upstream_target[:, valid], rtol=1e-6, atol=1e-6)
        metric = to_metric(item["pointmap"][None], item["scale"][None])[0]
        assert (metric - camera)[:, valid].abs().max() < 1e-5


def test_predict_gives_transformers_post_processed_xyz(tmp_path):
    """A tiny pointmap model: our metric XYZ (validation path and ``predict``'s NAME.npy) equals what
    transformers' ``post_process_pointmap_estimation`` makes of the same model outputs, on X, Y and Z."""
    from sapiens2_ft.predict.run import Model, predict_images

    processor = processor_class()(size={"height": 128, "width": 96})
    torch.manual_seed(0)
    module = PointmapModule(size="tiny", input_size=(128, 96))
    module.configure_model()
    module.eval()
    final = [m for m in module.model.scale_head.modules() if isinstance(m, torch.nn.Linear)][-1]
    with torch.no_grad():  # scales around 2 (a random head may predict negative ones)
        final.weight.mul_(0.01)
        final.bias.fill_(2.0)
        pixels = torch.randn(2, 3, 128, 96)
        raw = module.model(pixels)
        ours = module._metric(module.predict(pixels), {})
    theirs = torch.stack([r["pointmap"] for r in processor.post_process_pointmap_estimation(raw)])
    assert not torch.allclose(raw.scales, torch.ones_like(raw.scales), atol=0.5)
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)

    images = tmp_path / "images"
    images.mkdir()
    rng = np.random.default_rng(0)
    cv2.imwrite(str(images / "a.png"), rng.integers(0, 255, (256, 192, 3), dtype=np.uint8))
    captured = []
    hook = module.model.register_forward_hook(lambda _m, _i, output: captured.append(output))
    predict_images([Model(module.inference, "pointmap", tmp_path / "out")], {"a.png": images / "a.png"}, batch_size=1)
    hook.remove()
    saved = torch.from_numpy(np.load(tmp_path / "out" / "a.npy")).permute(2, 0, 1)
    theirs = processor.post_process_pointmap_estimation(captured[0], source_sizes=[(256, 192)])[0]["pointmap"]
    torch.testing.assert_close(saved, theirs, rtol=1e-4, atol=1e-5)


def test_canonical_focal_must_match_the_data():
    K = torch.tensor([[[600.0, 0, 40], [0, 600.0, 30], [0, 0, 1]]])
    batch = {"scale": torch.tensor([768.0 / 600.0]), "intrinsics": K}
    PointmapModule(canonical_focal=768.0).check_focal(batch)
    with pytest.raises(ValueError, match="model.canonical_focal is 500"):
        PointmapModule(canonical_focal=500.0).check_focal(batch)
