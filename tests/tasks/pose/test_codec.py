"""Tests for the UDP Gaussian heatmap codec (sapiens2_ft.tasks.pose.codec.udp_heatmap)."""

import math

import cv2
import numpy as np
import pytest
import torch
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

from sapiens2_ft.tasks.pose.codec import (
    decode_heatmaps,
    encode_heatmaps,
    flip_heatmaps,
    heatmap_to_input_coords,
    input_to_heatmap_coords,
)

SIZES = [((64, 48), 2.0), ((256, 192), 6.0)]


def _random_keypoints(gen, shape, hw, margin):
    h, w = hw
    u = torch.rand(*shape, 2, generator=gen, dtype=torch.float64)
    lo = torch.tensor([margin, margin], dtype=torch.float64)
    hi = torch.tensor([w - 1 - margin, h - 1 - margin], dtype=torch.float64)
    return (lo + u * (hi - lo)).float()


def _ref_encode(kpts, weights, hw, sigma):
    """Per-keypoint full-grid Gaussian with window masking (numpy)."""
    h, w = hw
    r = math.floor(3 * sigma)
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float64)
    out = np.zeros((len(kpts), h, w))
    tw = np.zeros(len(kpts))
    for k, ((mx, my), v) in enumerate(zip(kpts, weights)):
        cx, cy = math.floor(mx + 0.5), math.floor(my + 0.5)
        if v <= 0 or cx + r < 0 or cy + r < 0 or cx - r > w - 1 or cy - r > h - 1:
            continue
        g = np.exp(-((xx - mx) ** 2 + (yy - my) ** 2) / (2 * sigma**2))
        out[k] = g * ((np.abs(xx - cx) <= r) & (np.abs(yy - cy) <= r))
        tw[k] = v
    return out, tw


def _ref_dark(heatmaps, kernel=11):
    """Straightforward DARK-UDP (MMPose-style): full-map zero-padded cv2 blur, log, Newton."""
    heatmaps = np.asarray(heatmaps, dtype=np.float32)
    k_, h, w = heatmaps.shape
    out = np.zeros((k_, 2), np.float32)
    b = (kernel - 1) // 2
    for k in range(k_):
        y, x = divmod(int(np.argmax(heatmaps[k])), w)
        out[k] = x, y
        score = heatmaps[k, y, x]
        if score <= 0:
            continue
        padded = np.pad(heatmaps[k], b)
        blur = cv2.GaussianBlur(padded, (kernel, kernel), 0)[b:-b, b:-b]
        blur *= score / blur.max()
        lp = np.pad(np.log(np.clip(blur, 1e-3, 50.0)), 1, mode="edge").astype(np.float64)
        py, px = y + 1, x + 1
        c = lp[py, px]
        dx = 0.5 * (lp[py, px + 1] - lp[py, px - 1])
        dy = 0.5 * (lp[py + 1, px] - lp[py - 1, px])
        dxx = lp[py, px + 1] - 2 * c + lp[py, px - 1]
        dyy = lp[py + 1, px] - 2 * c + lp[py - 1, px]
        dxy = 0.5 * (lp[py + 1, px + 1] - lp[py, px + 1] - lp[py + 1, px] + 2 * c
                     - lp[py, px - 1] - lp[py - 1, px] + lp[py - 1, px - 1])
        hess = np.array([[dxx, dxy], [dxy, dyy]]) + np.finfo(np.float32).eps * np.eye(2)
        out[k] -= np.linalg.solve(hess, np.array([dx, dy]))
    return out


@pytest.mark.parametrize("hw,sigma", SIZES)
def test_round_trip_subpixel(hw, sigma):
    gen = torch.Generator().manual_seed(0)
    kpts = _random_keypoints(gen, (3, 7), hw, margin=3 * sigma + 6)
    heatmaps, tw = encode_heatmaps(kpts, torch.ones(3, 7), hw, sigma)
    assert heatmaps.shape == (3, 7, *hw) and heatmaps.dtype == torch.float32
    assert torch.equal(tw, torch.ones(3, 7))
    coords, scores = decode_heatmaps(heatmaps)
    assert coords.shape == (3, 7, 2) and scores.shape == (3, 7)
    assert (coords - kpts).abs().max() < 0.05
    assert torch.allclose(scores, heatmaps.flatten(-2).amax(-1))


@pytest.mark.parametrize("hw,sigma", SIZES + [((40, 30), 1.5)])
def test_encode_matches_full_grid_reference(hw, sigma):
    gen = torch.Generator().manual_seed(1)
    h, w = hw
    kpts = torch.rand(2, 40, 2, generator=gen) * torch.tensor([w + 40.0, h + 40.0]) - 20
    weights = (torch.rand(2, 40, generator=gen) > 0.2).float() * 0.7
    heatmaps, tw = encode_heatmaps(kpts, weights, hw, sigma)
    for b in range(2):
        ref, ref_w = _ref_encode(kpts[b].double().numpy(), weights[b].numpy(), hw, sigma)
        np.testing.assert_allclose(heatmaps[b].numpy(), ref, atol=1e-6)
        np.testing.assert_allclose(tw[b].numpy(), ref_w)


def test_encode_weight_rules():
    """Rule: rendered iff weight > 0, mu finite, and some window pixel
    (|p - round(mu)| <= 3 sigma per axis) lies in the map; otherwise zero channel, weight 0."""
    hw, sigma = (64, 48), 2.0  # window radius 6
    kpts = torch.tensor([
        [20.0, 30.0],   # 0: inside, weight 0 -> dropped
        [-7.0, 30.0],   # 1: window [-13, -1] fully left -> dropped
        [20.0, 70.0],   # 2: window rows [64, 76] fully below -> dropped
        [-5.6, 30.0],   # 3: round -> -6, window [-12, 0] touches column 0 -> kept
        [53.4, 69.2],   # 4: round -> (53, 69), touches col 47 / row 63 -> kept
        [float("nan"), 3.0],  # 5: non-finite -> dropped
        [20.0, 30.0],   # 6: inside, fractional weight -> kept as is
    ])
    weights = torch.tensor([0.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.25])
    heatmaps, tw = encode_heatmaps(kpts, weights, hw, sigma)
    assert tw.tolist() == [0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.25]
    nonzero = heatmaps.flatten(1).ne(0).any(1)
    assert nonzero.tolist() == [False, False, False, True, True, False, True]
    assert torch.isfinite(heatmaps).all()
    assert heatmaps[3, :, 1:].eq(0).all() and heatmaps[3, 30, 0] > 0
    assert heatmaps[6].max() == pytest.approx(1.0)  # peak not scaled by the weight


def test_encode_dtype_and_out_buffer():
    kpts = torch.tensor([[[10.2, 12.7], [30.5, 40.1]]])
    ref, tw = encode_heatmaps(kpts, torch.ones(1, 2), (64, 48), 2.0)
    half, tw_half = encode_heatmaps(kpts, torch.ones(1, 2), (64, 48), 2.0, dtype=torch.float16)
    assert half.dtype == torch.float16 and tw_half.dtype == torch.float32
    assert torch.allclose(half.float(), ref, atol=1e-3)
    buf = torch.full((1, 2, 64, 48), 7.0)
    out, _ = encode_heatmaps(kpts, torch.ones(1, 2), (64, 48), 2.0, out=buf)
    assert out.data_ptr() == buf.data_ptr() and torch.equal(out, ref)
    with pytest.raises(ValueError):
        encode_heatmaps(kpts, torch.ones(1, 2), (64, 48), 2.0, out=torch.empty(1, 2, 48, 64))
    with pytest.raises(ValueError):
        encode_heatmaps(kpts, torch.ones(2), (64, 48), 2.0)


@pytest.mark.parametrize("c", [1e-3, 1.0, 100.0])
def test_decode_scale_invariant(c):
    gen = torch.Generator().manual_seed(2)
    kpts = _random_keypoints(gen, (2, 9), (64, 48), margin=-2)  # includes border peaks
    heatmaps, _ = encode_heatmaps(kpts, torch.ones(2, 9), (64, 48), 2.0)
    heatmaps = heatmaps + 0.02 * torch.randn(heatmaps.shape, generator=gen)
    base, base_scores = decode_heatmaps(heatmaps)
    coords, scores = decode_heatmaps(heatmaps * c)
    assert torch.allclose(coords, base, atol=1e-4)
    assert torch.allclose(scores, base_scores * c, rtol=1e-5)


@pytest.mark.parametrize("hw,sigma", SIZES)
@pytest.mark.parametrize("margin", [8.0, -1.5])  # interior peaks / peaks at and beyond the border
def test_decode_matches_full_map_dark_reference(hw, sigma, margin):
    gen = torch.Generator().manual_seed(3)
    kpts = _random_keypoints(gen, (2, 12), hw, margin=margin)
    heatmaps, _ = encode_heatmaps(kpts, torch.ones(2, 12), hw, sigma)
    heatmaps = heatmaps + 0.05 * torch.randn(heatmaps.shape, generator=gen)
    coords, _ = decode_heatmaps(heatmaps)
    ref = np.stack([_ref_dark(heatmaps[b].numpy()) for b in range(2)])
    argmax = heatmaps.flatten(-2).argmax(-1)
    argmax = torch.stack([argmax % hw[1], argmax // hw[1]], -1).float().numpy()
    ref_step = np.abs(ref - argmax).max(-1)
    # Interior: DARK steps > 1 px (common for noisy sigma-6 maps) are taken too.
    # Border (edge padding makes the log map non-concave across the edge): steps
    # > 1 px on non-concave points are rejected by design, so compare the rest.
    compare = ref_step <= (5.0 if margin > 0 else 1.0)
    assert compare.mean() > 0.6
    np.testing.assert_allclose(coords.numpy()[compare], ref[compare], atol=0.1)
    assert (np.abs(coords.numpy() - argmax).max(-1) <= 5.0).all()


def test_decode_at_the_border_matches_dark_reference():
    """Peaks on each edge row / column and the corners, no noise: every one as the full-map reference (edge padding
    of the log map), not only those with small steps."""
    h, w = 64, 48
    kpts = torch.tensor([[[20.3, 0.2], [20.3, h - 1.3], [0.2, 30.6], [w - 1.3, 30.6], [0.0, 0.0],
                          [w - 1.0, h - 1.0], [w - 1.4, h - 1.2]]])
    heatmaps, _ = encode_heatmaps(kpts, torch.ones(1, 7), (h, w), 2.0)
    coords, _ = decode_heatmaps(heatmaps)
    np.testing.assert_allclose(coords[0].numpy(), _ref_dark(heatmaps[0].numpy()), atol=1e-3)


def test_decode_max_step_one_px_bound():
    gen = torch.Generator().manual_seed(6)
    kpts = _random_keypoints(gen, (2, 12), (256, 192), margin=30)
    heatmaps, _ = encode_heatmaps(kpts, torch.ones(2, 12), (256, 192), 6.0)
    heatmaps = heatmaps + 0.05 * torch.randn(heatmaps.shape, generator=gen)
    argmax = heatmaps.flatten(-2).argmax(-1)
    argmax = torch.stack([argmax % 192, argmax // 192], -1).float()
    strict, _ = decode_heatmaps(heatmaps, max_step=1.0)
    default, _ = decode_heatmaps(heatmaps)
    assert ((strict - argmax).abs() <= 1).all()
    assert ((default - argmax).abs() > 1).any()  # noisy sigma-6 argmax is often > 1 px off
    err = lambda c: (c - kpts).norm(dim=-1).mean()  # noqa: E731
    assert err(default) < err(strict)


def test_blur_kernel_matches_cv2():
    from sapiens2_ft.tasks.pose.codec import _blur_matrix

    g = _blur_matrix(11, torch.device("cpu"))
    assert g.shape == (13, 3) and torch.equal(g[1:12, 1], g[:11, 0])
    np.testing.assert_allclose(g[:11, 0].numpy(), cv2.getGaussianKernel(11, 0).ravel(), atol=1e-7)


def test_decode_degenerate_channels():
    h = torch.zeros(1, 4, 16, 12)
    h[0, 1] = -1.0                 # negative everywhere
    h[0, 1, 5, 7] = -0.5           # max <= 0: argmax, score <= 0
    h[0, 2] = 3.0                  # flat positive map: near the first pixel, finite
    h[0, 3, 9, 4] = 1.0            # single spike: step stays within 1 px
    coords, scores = decode_heatmaps(h)
    assert coords[0, 0].tolist() == [0.0, 0.0] and scores[0, 0] == 0
    assert coords[0, 1].tolist() == [7.0, 5.0] and scores[0, 1] == -0.5
    assert (coords[0, 2].abs() <= 1).all() and scores[0, 2] == 3.0
    assert ((coords[0, 3] - torch.tensor([4.0, 9.0])).abs() <= 1).all()
    assert torch.isfinite(coords).all()
    with pytest.raises(ValueError, match="odd"):
        decode_heatmaps(h, blur_kernel_size=10)
    with pytest.raises(ValueError, match="non-empty"):
        decode_heatmaps(torch.zeros(1, 1, 0, 12))
    row, _ = decode_heatmaps(h[..., 9:10, :])  # one row, or one column, is a map
    column, _ = decode_heatmaps(h[..., 4:5])
    assert row[0, 3].tolist() == [4.0, 0.0] and column[0, 3].tolist() == [0.0, 9.0]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_decode_low_precision_inputs(dtype):
    gen = torch.Generator().manual_seed(4)
    kpts = _random_keypoints(gen, (2, 5), (64, 48), margin=12)
    heatmaps, _ = encode_heatmaps(kpts, torch.ones(2, 5), (64, 48), 2.0)
    coords, scores = decode_heatmaps(heatmaps.to(dtype))
    assert coords.dtype == torch.float32 and scores.dtype == torch.float32
    assert (coords - kpts).abs().max() < 0.1


@pytest.mark.parametrize("hw,sigma", SIZES)
def test_flip_heatmaps_consistent_with_udp_flip(hw, sigma):
    h, w = hw
    gen = torch.Generator().manual_seed(5)
    flip_indices = torch.tensor([0, 2, 1, 4, 3])  # centre + two left/right pairs
    kpts = _random_keypoints(gen, (3, 5), hw, margin=3 * sigma + 6)
    heatmaps, _ = encode_heatmaps(kpts, torch.ones(3, 5), hw, sigma)
    flipped_kpts = kpts[:, flip_indices].clone()
    flipped_kpts[..., 0] = (w - 1) - flipped_kpts[..., 0]
    flipped = flip_heatmaps(heatmaps, flip_indices)
    expected, _ = encode_heatmaps(flipped_kpts, torch.ones(3, 5), hw, sigma)
    assert torch.allclose(flipped, expected, atol=1e-6)
    coords, _ = decode_heatmaps(flipped)
    assert (coords - flipped_kpts).abs().max() < 0.05
    with pytest.raises(ValueError):
        flip_heatmaps(heatmaps, [0, 1, 1, 3, 4])


def test_image_flip_equals_heatmap_flip_under_udp():
    input_size, hm_size = (1024, 768), (256, 192)
    x_in = torch.tensor([[0.0, 5.0], [767.0, 100.0], [123.4, 567.8]])
    flipped_in = x_in.clone()
    flipped_in[:, 0] = (input_size[1] - 1) - flipped_in[:, 0]
    a = input_to_heatmap_coords(flipped_in, input_size, hm_size)
    b = input_to_heatmap_coords(x_in, input_size, hm_size)
    assert torch.allclose(a[:, 0], (hm_size[1] - 1) - b[:, 0], atol=1e-4)


def test_coords_round_trip():
    input_size, hm_size = (1024, 768), (256, 192)
    xy = torch.tensor([[0.0, 0.0], [767.0, 1023.0], [100.25, 3.5]])
    hm = input_to_heatmap_coords(xy, input_size, hm_size)
    assert torch.allclose(hm[1], torch.tensor([191.0, 255.0]))
    assert torch.allclose(heatmap_to_input_coords(hm, input_size, hm_size), xy, atol=1e-4)
    arr = np.array([[100.25, 3.5]])
    np.testing.assert_allclose(input_to_heatmap_coords(arr, input_size, hm_size), hm[2:].numpy(), rtol=1e-6)
    np.testing.assert_allclose(
        heatmap_to_input_coords(input_to_heatmap_coords(arr, input_size, hm_size), input_size, hm_size),
        arr, atol=1e-9)
    with pytest.raises(ValueError):
        input_to_heatmap_coords(xy, (1, 768), hm_size)


DEVICES = ["meta"] + (["cuda"] if torch.cuda.is_available() else [])


class MixedDevices(TorchDispatchMode):
    """Records every operation that meets tensors (not 0-d ones, which any device may take) of two devices."""

    def __init__(self):
        super().__init__()
        self.mixed = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        leaves = pytree.tree_leaves((args, kwargs or {}))
        devices = {t.device.type for t in leaves if isinstance(t, torch.Tensor) and t.dim() > 0}
        if len(devices) > 1:
            self.mixed.append(f"{func}: {sorted(devices)}")
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("device", DEVICES)
def test_device_follows_input(device):
    """Every output on the input's device, and no operation meets a tensor of another. ``meta`` (shapes only) is a
    device other than the CPU on any machine: a tensor made without ``device=`` meets the input there. The GPU,
    where there is one, checks the values too."""
    kpts = torch.tensor([[[10.2, 12.7]]], device=device)
    with MixedDevices() as mode:
        heatmaps, tw = encode_heatmaps(kpts, torch.ones(1, 1, device=device), (64, 48), 2.0)
        coords, scores = decode_heatmaps(heatmaps)
        flipped = flip_heatmaps(heatmaps, [0])
    assert mode.mixed == []
    assert {t.device.type for t in (heatmaps, tw, coords, scores, flipped)} == {device}
    assert heatmaps.shape == (1, 1, 64, 48) and coords.shape == (1, 1, 2) and scores.shape == (1, 1)
    if device != "meta":
        assert (coords.cpu() - kpts.cpu()).abs().max() < 0.05
