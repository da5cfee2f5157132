"""The dense maps' helpers: vector lengths (the sum-of-squares form gives torch's norm and normalize, values and
gradients, zero vectors included), angles, masks, finite differences and the resize of a head's output."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from sapiens2_ft.tasks.dense_maps import (
    angular_error_deg, finite_differences, flatten_mask, resize_to, unit_vectors, vector_length,
)


def _vectors(dtype=torch.float32) -> torch.Tensor:
    x = torch.randn(2, 3, 5, 6, generator=torch.Generator().manual_seed(0), dtype=dtype)
    x[0, :, 0, 0] = 0.0  # a zero vector
    x[1, :, 2, 3] = 1e-8  # shorter than every eps below
    x[1, :, 4, 5] = torch.tensor([3.0, -4.0, 12.0], dtype=dtype)  # length 13
    return x


@pytest.mark.parametrize("dtype,eps", [(torch.float32, 1e-6), (torch.float64, 1e-12)])
def test_unit_vectors_give_normalize_and_its_gradient(dtype, eps):
    x = _vectors(dtype).requires_grad_()
    ref = x.detach().clone().requires_grad_()
    weights = torch.randn(x.shape, generator=torch.Generator().manual_seed(1), dtype=dtype)
    ours, theirs = unit_vectors(x, dim=1, eps=eps), F.normalize(ref, dim=1, eps=eps)
    torch.testing.assert_close(ours, theirs)
    torch.testing.assert_close(unit_vectors(x.detach(), eps=eps), theirs.detach())  # along dim 1 by default
    (ours * weights).sum().backward()
    (theirs * weights).sum().backward()
    assert torch.isfinite(x.grad).all()
    torch.testing.assert_close(x.grad, ref.grad)
    assert ours[1, :, 4, 5].tolist() == pytest.approx([3 / 13, -4 / 13, 12 / 13])


def test_vector_length_is_the_norm_clamped_at_eps_along_any_dim():
    x = _vectors(torch.float64)
    torch.testing.assert_close(vector_length(x), x.norm(dim=1, keepdim=True))
    assert vector_length(x)[1, 0, 4, 5].item() == pytest.approx(13.0)
    flat = x.permute(0, 2, 3, 1).reshape(-1, 3)
    torch.testing.assert_close(vector_length(flat, dim=1)[:, 0], flat.norm(dim=1))
    torch.testing.assert_close(vector_length(x, dim=0, eps=0.5), x.norm(dim=0, keepdim=True).clamp_min(0.5))


def test_finite_differences_and_their_pairs():
    x = torch.tensor([[0.0, 1.0, 3.0], [2.0, 2.0, 7.0]]).view(1, 1, 2, 3)
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]]).view(1, 1, 2, 3)
    (dx, pair_x), (dy, pair_y) = finite_differences(x, mask)
    assert dx.flatten().tolist() == [1.0, 2.0, 0.0, 5.0] and pair_x.flatten().tolist() == [1.0, 0.0, 1.0, 1.0]
    assert dy.flatten().tolist() == [2.0, 1.0, 4.0] and pair_y.flatten().tolist() == [1.0, 1.0, 0.0]


def test_resize_to_is_bilinear_on_pixel_centres():
    """Output pixel i of a 4x upsampling samples the input at (i + 0.5) / 4 - 0.5 (half-pixel centres, as
    ``align_corners=False``): a ramp stays a ramp of a quarter slope, clamped at the ends."""
    ramp = torch.arange(8.0).view(1, 1, 1, 8).expand(1, 1, 2, 8)
    up = resize_to(ramp, (8, 32))
    expected = ((torch.arange(32.0) + 0.5) / 4 - 0.5).clamp(0, 7)
    torch.testing.assert_close(up[0, 0], expected.expand(8, 32))
    assert resize_to(ramp, None) is ramp and resize_to(ramp, (2, 8)) is ramp  # nothing to do: the same tensor


def test_angle_of_parallel_vectors_is_zero_not_nan():
    """Unit vectors' dot products round up to 1 + 2e-16 (25 of these 256): the clamp keeps acos defined."""
    v = torch.randn(1, 3, 16, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    angle = angular_error_deg(v, 3.0 * v)
    assert angle.shape == (1, 16, 16) and angle.abs().max() < 1e-5
    assert angular_error_deg(v, -v).sub(180.0).abs().max() < 1e-5


def test_flatten_mask_takes_three_shapes():
    like = torch.zeros(2, 3, 4, 5)
    mask = torch.rand(2, 4, 5, generator=torch.Generator().manual_seed(0)) > 0.5
    assert torch.equal(flatten_mask(mask.unsqueeze(1), like), mask)
    assert torch.equal(flatten_mask(mask.float(), like), mask)
    assert flatten_mask(None, like).all() and flatten_mask(None, like).shape == (2, 4, 5)
    with pytest.raises(ValueError, match="mask must be"):
        flatten_mask(mask.unsqueeze(1).expand(2, 2, 4, 5), like)
