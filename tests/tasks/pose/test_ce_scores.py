"""Keypoint scores, in [0, 1] whatever the head: of heatmap cross-entropy heads the probability mass around the most
probable pixel, of MSE heads the heatmap peak clipped to [0, 1]; the same decode in validation and in an exported model
loaded to predict."""

from __future__ import annotations

import math

import pytest
import torch

from sapiens2_ft.predict.loading import load_inference
from sapiens2_ft.tasks.pose.codec import heatmap_probabilities, window_mass
from sapiens2_ft.tasks.pose.loss import heatmap_cross_entropy
from sapiens2_ft.tasks.pose.inference import score_radius
from sapiens2_ft.tasks.pose.module import PoseModule


def loop_mass(maps: torch.Tensor, coords: torch.Tensor, radius: int) -> torch.Tensor:
    """Reference: sum the window pixel by pixel."""
    k, h, w = maps.shape
    out = torch.zeros(k)
    for i in range(k):
        cx, cy = math.floor(coords[i, 0] + 0.5), math.floor(coords[i, 1] + 0.5)
        for y in range(cy - radius, cy + radius + 1):
            for x in range(cx - radius, cx + radius + 1):
                if 0 <= y < h and 0 <= x < w:
                    out[i] += maps[i, y, x]
    return out


def test_probabilities_are_each_maps_softmax():
    logits = torch.randn(2, 3, 8, 6) * 4
    probs = heatmap_probabilities(logits)
    assert torch.allclose(probs.sum((-2, -1)), torch.ones(2, 3))
    flat = logits.reshape(2, 3, -1)
    reference = (flat - flat.logsumexp(-1, keepdim=True)).exp().reshape(logits.shape)
    assert torch.allclose(probs, reference, atol=1e-7)


@pytest.mark.parametrize("radius", [0, 1, 2, 4])
def test_window_mass_matches_a_pixel_loop(radius):
    torch.manual_seed(radius)
    probs = heatmap_probabilities(torch.randn(7, 9, 7) * 3)
    # Inside, at the borders, half a pixel off (ties round up) and far outside the map.
    coords = torch.tensor([[3.2, 4.4], [0.0, 0.0], [6.0, 8.0], [2.5, 3.5], [-1.6, 4.0], [20.0, 3.0], [3.0, -9.0]])
    got = window_mass(probs, coords, radius)
    assert torch.allclose(got, loop_mass(probs, coords, radius), atol=1e-6)
    assert ((got >= 0) & (got <= 1)).all()
    assert got[5] == 0 and got[6] == 0  # windows wholly outside the map


def test_window_mass_of_a_peak_is_its_gaussian_share():
    """A target-shaped distribution (sigma 2) keeps ~0.95 of its mass within 2 sigma: what a perfect model scores."""
    h, w, sigma = 64, 48, 2.0
    y, x = torch.meshgrid(torch.arange(h, dtype=torch.float64), torch.arange(w, dtype=torch.float64), indexing="ij")
    g = torch.exp(-((x - 20) ** 2 + (y - 30) ** 2) / (2 * sigma**2))
    mass = window_mass((g / g.sum())[None].float(), torch.tensor([[20.0, 30.0]]), 4)
    def share(centre: int, size: int) -> float:  # the separable Gaussian's 1-D share of pixels within 4
        weights = [math.exp(-((i - centre) ** 2) / (2 * sigma**2)) for i in range(size)]
        return sum(weights[centre - 4:centre + 5]) / sum(weights)

    assert mass.item() == pytest.approx(share(20, w) * share(30, h), abs=1e-6)
    assert mass.item() == pytest.approx(math.erf(4.5 / (sigma * math.sqrt(2))) ** 2, abs=5e-3)  # ~0.95


def test_window_mass_rejects_bad_shapes():
    with pytest.raises(ValueError, match="coords"):
        window_mass(torch.rand(2, 4, 4), torch.zeros(3, 2), 1)
    with pytest.raises(ValueError, match="radius"):
        window_mass(torch.rand(2, 4, 4), torch.zeros(2, 2), -1)


def ce_module(**kwargs) -> PoseModule:
    module = PoseModule(size="tiny", keypoints="coco17", input_size=(64, 48), loss="heatmap_ce", loss_weight=1.0,
                        **kwargs)
    module.configure_model()
    return module.eval()


def test_ce_inference_scores_are_masses_of_the_flip_averaged_softmax():
    torch.manual_seed(0)
    module = ce_module()
    x = torch.randn(2, 3, 64, 48)
    with torch.no_grad():
        out = module.infer(x)
        logits = module.predict(x)["heatmaps"]
        flipped = module.predict(x.flip(-1))["heatmaps"]
    flip = module.inference.flip_indices
    probs = (heatmap_probabilities(logits) + heatmap_probabilities(flipped[:, flip].flip(-1))) / 2
    assert torch.allclose(out["heatmaps"].exp(), probs, atol=1e-6)  # log-probabilities, logits for the loss
    assert ((out["scores"] >= 0) & (out["scores"] <= 1)).all()
    at = probs.flatten(-2).argmax(-1)  # the most probable pixel, not the DARK-refined keypoint (any runtime has it)
    peaks = torch.stack([at % 12, at // 12], -1).float()  # 16x12 maps
    expected = torch.stack([loop_mass(probs[b], peaks[b], score_radius(2.0)) for b in range(2)])
    assert torch.allclose(out["scores"], expected, atol=1e-5)
    # The validation loss of the flip-averaged log-probabilities is the cross-entropy of that distribution.
    target = torch.rand_like(probs)
    weights = torch.ones(probs.shape[:2])
    reference = -(target / target.sum((-2, -1), keepdim=True) * probs.log()).sum((-2, -1)).mean()
    assert heatmap_cross_entropy(out["heatmaps"], target, weights).item() == pytest.approx(reference.item(), rel=1e-5)


@pytest.mark.parametrize("offset", [0.0, 30.0, -30.0])
def test_mse_scores_are_heatmap_peaks_within_0_and_1(offset):
    """The issue's model: an MSE head whose maps still peak at 5.7-10 (pretrained with cross-entropy, 2 steps of MSE)
    scored 5.7-10; scores are its peaks clipped to [0, 1], wherever the maps lie (``offset``: the head's bias)."""
    torch.manual_seed(0)
    module = PoseModule(size="tiny", keypoints="coco17", input_size=(64, 48), flip_test=False)
    module.configure_model()
    with torch.no_grad():
        module.model.decode_head.predictor.bias.add_(offset)
    x = torch.randn(1, 3, 64, 48)
    with torch.no_grad():
        out = module.eval().infer(x)
        maps = module.predict(x)["heatmaps"]
    assert torch.equal(out["heatmaps"], maps)
    peaks = maps.flatten(-2).amax(-1)
    assert torch.equal(out["scores"], peaks.clamp(0, 1))
    assert ((out["scores"] >= 0) & (out["scores"] <= 1)).all()
    if offset > 0:
        assert peaks.min() > 1 and (out["scores"] == 1).all()  # the maps are far above 1: each score says "sure"
    if offset < 0:
        assert peaks.max() < 0 and (out["scores"] == 0).all()


def test_exported_ce_model_is_decoded_as_one(tmp_path):
    """An exported CE model records ``heatmap_output: logits``; loaded to predict, it decodes as in validation."""
    torch.manual_seed(0)
    module = ce_module()
    module.model.save_pretrained(tmp_path / "model")
    assert module.model.config.heatmap_output == "logits"
    loaded, task = load_inference(str(tmp_path / "model"), tmp_path / "out", keypoints="coco17")
    assert task == "pose" and loaded.heatmap_output == "logits"
    x = torch.randn(2, 3, 64, 48)
    with torch.no_grad():
        assert torch.allclose(loaded.infer(x)["scores"], module.infer(x)["scores"], atol=1e-6)
    # An MSE model's config says nothing, and loads as MSE.
    mse = PoseModule(size="tiny", keypoints="coco17", input_size=(64, 48))
    mse.configure_model()
    mse.model.save_pretrained(tmp_path / "mse")
    assert load_inference(str(tmp_path / "mse"), tmp_path / "out2", keypoints="coco17")[0].heatmap_output == "heatmaps"


def test_cross_entropy_averages_over_the_weighted_keypoints():
    """Each keypoint's soft-target CE, weighted, divided by the weights' sum (at least 1: no keypoint gives 0)."""
    torch.manual_seed(0)
    logits, target = torch.randn(1, 3, 6, 5), torch.rand(1, 3, 6, 5)
    each = -(target / target.sum((-2, -1), keepdim=True) * logits.flatten(-2).log_softmax(-1).view_as(logits))
    each = each.sum((-2, -1))[0]
    for weights, expected in (([1.0, 0.0, 0.5], (each[0] + 0.5 * each[2]) / 1.5), ([0.0, 1.0, 0.0], each[1]),
                              ([0.0, 0.0, 0.0], torch.tensor(0.0))):
        got = heatmap_cross_entropy(logits, target, torch.tensor([weights]))
        assert got.item() == pytest.approx(expected.item(), rel=1e-5, abs=1e-7), weights
