"""Vector lengths of the dense maps: the sum-of-squares form gives torch's norm and normalize, values and
gradients, zero vectors included."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from sapiens2_ft.tasks.dense_maps import unit_vectors, vector_length


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
