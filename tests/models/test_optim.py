"""AdamW parameter groups (weight decay, layer-wise lr decay) and the warm-up + linear-decay schedule."""

from __future__ import annotations

import pytest
import torch
from transformers import Sapiens2Config, Sapiens2ForPoseEstimation, Sapiens2HeadConfig

from sapiens2_ft.models.presets import BACKBONES

from sapiens2_ft.models.optim import OptimConfig, build_optimizer, layer_depth, param_groups, warmup_linear_decay


@pytest.fixture(scope="module")
def model():
    config = Sapiens2Config(**{**BACKBONES["tiny"], "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 3},
                            use_mask_token=True, image_size=[64, 48],
                            head_config=Sapiens2HeadConfig(upsample_out_channels=[16], conv_out_channels=[16]))
    config.num_labels = 17
    return Sapiens2ForPoseEstimation(config)


def _names(model) -> dict[int, str]:
    return {id(p): n for n, p in model.named_parameters()}


def _group_of(groups) -> dict[int, dict]:
    return {id(p): g for g in groups for p in g["params"]}


def test_every_parameter_in_exactly_one_group(model):
    groups = param_groups(model, OptimConfig(layer_decay=0.8), num_layers=3)
    ids = [id(p) for g in groups for p in g["params"]]
    assert len(ids) == len(set(ids)) == len(list(model.parameters()))
    assert len({g["name"] for g in groups}) == len(groups)


def upstream_decays(name: str, param) -> bool:
    """Upstream Sapiens2's rule (engine/runners/base_runner.py), retyped: no decay for 1-D tensors, biases and
    anything named pos_embed; everything else (cls / register / mask tokens included) is decayed."""
    return not (len(param.shape) == 1 or name.endswith(".bias") or "pos_embed" in name)


def test_weight_decay_follows_the_upstream_rule(model):
    cfg = OptimConfig(weight_decay=0.05)
    names = _names(model)
    group_of = _group_of(param_groups(model, cfg, num_layers=3))
    decay = {names[i] for i, g in group_of.items() if g["weight_decay"] == 0.05}
    no_decay = {names[i] for i, g in group_of.items() if g["weight_decay"] == 0.0}
    assert no_decay | decay == set(names.values())
    expected = {name for name, param in model.named_parameters() if upstream_decays(name, param)}
    assert decay == expected
    tokens = {"model.embeddings.cls_token", "model.embeddings.register_tokens", "model.embeddings.mask_token"}
    assert tokens <= decay  # upstream decays them (ndim 3); they were exempt here before
    # Norms and layer scales are 1-D; linear/conv weights are decayed.
    assert "model.norm.weight" in no_decay
    assert "model.model.layer.0.layer_scale1.lambda1" in no_decay
    assert "model.model.layer.2.attention.q_norm.weight" in no_decay
    assert "model.model.layer.1.attention.q_proj.weight" in decay
    assert "model.embeddings.patch_embeddings.weight" in decay
    assert "decode_head.predictor.weight" in decay


def test_position_embedding_names_are_never_decayed():
    torch.manual_seed(0)
    model = torch.nn.Module()
    model.pos_embed = torch.nn.Parameter(torch.zeros(1, 4, 8))
    model.proj = torch.nn.Linear(8, 8)
    groups = param_groups(model, OptimConfig(weight_decay=0.1), num_layers=1)
    decayed = [p for g in groups if g["weight_decay"] > 0 for p in g["params"]]
    assert len(decayed) == 1 and decayed[0] is model.proj.weight


def test_layer_wise_decay_scales(model):
    rate, lr, num_layers = 0.8, 1e-3, 3
    cfg = OptimConfig(lr=lr, layer_decay=rate)
    names = _names(model)
    seen = set()
    for pid, group in _group_of(param_groups(model, cfg, num_layers)).items():
        name = names[pid]
        if name.startswith("model.embeddings."):
            expected, label = rate ** (num_layers + 1), "embed"
        elif name.startswith("model.model.layer."):
            i = int(name.split(".")[3])
            expected, label = rate ** (num_layers - i), f"layer{i}"
        else:  # final norm and the head
            assert name.startswith(("model.norm.", "decode_head.")), name
            expected, label = 1.0, "head"
        assert group["lr_scale"] == pytest.approx(expected), name
        assert group["lr"] == pytest.approx(lr * expected), name
        assert group["name"].split("_no_decay")[0] == label, (name, group["name"])
        seen.add(label)
    assert seen == {"embed", "layer0", "layer1", "layer2", "head"}


def test_layer_depth():
    assert layer_depth("model.embeddings.cls_token", 24) == 0
    assert layer_depth("model.model.layer.0.mlp.up_proj.weight", 24) == 1
    assert layer_depth("model.model.layer.23.mlp.up_proj.weight", 24) == 24
    assert layer_depth("model.norm.weight", 24) == 25
    assert layer_depth("decode_head.predictor.weight", 24) == 25


def test_no_layer_decay_and_frozen_params(model):
    groups = param_groups(model, OptimConfig(lr=2e-4, layer_decay=1.0), num_layers=3)
    assert all(g["lr_scale"] == 1.0 and g["lr"] == 2e-4 for g in groups)
    frozen = model.model.embeddings.patch_embeddings.weight
    frozen.requires_grad_(False)
    try:
        groups = param_groups(model, OptimConfig(), num_layers=3)
        assert id(frozen) not in _group_of(groups)
    finally:
        frozen.requires_grad_(True)


def test_schedule_values():
    start, warmup, total = 1e-3, 100, 1100
    f = lambda step: warmup_linear_decay(step, warmup, total, start)  # noqa: E731
    assert f(0) == pytest.approx(start)
    assert f(50) == pytest.approx(start + (1 - start) * 0.5)
    assert f(warmup) == pytest.approx(1.0)
    assert f(warmup + (total - warmup) // 2) == pytest.approx(0.5)
    assert f(total) == 0.0
    assert f(total + 10) == 0.0
    values = [f(s) for s in range(total + 1)]
    assert all(a < b for a, b in zip(values[:warmup], values[1:warmup + 1]))  # rising during warm-up
    assert all(a > b for a, b in zip(values[warmup:total], values[warmup + 1:]))  # then falling


def test_build_optimizer_steps_the_schedule(model):
    cfg = OptimConfig(lr=1e-3, weight_decay=0.1, layer_decay=0.5, warmup_steps=10, warmup_start_factor=0.01)
    out = build_optimizer(model, cfg, num_layers=3, total_steps=50)
    optimizer, sched = out["optimizer"], out["lr_scheduler"]
    assert sched["interval"] == "step"
    assert isinstance(optimizer, torch.optim.AdamW)
    assert not optimizer.defaults.get("fused")  # CPU model
    head = next(g for g in optimizer.param_groups if g["name"] == "head")
    embed = next(g for g in optimizer.param_groups if g["name"] == "embed")
    assert embed["lr_scale"] == pytest.approx(0.5**4)
    lrs = {}
    for step in range(51):
        lrs[step] = (head["lr"], embed["lr"])
        optimizer.step()
        sched["scheduler"].step()
    assert lrs[0][0] == pytest.approx(1e-3 * 0.01)
    assert lrs[10][0] == pytest.approx(1e-3)
    assert lrs[30][0] == pytest.approx(0.5e-3)
    assert lrs[50][0] == pytest.approx(0.0, abs=1e-12)
    for step, (h, e) in lrs.items():
        assert e == pytest.approx(h * 0.5**4), step


def test_warmup_longer_than_training_is_capped(model):
    cfg = OptimConfig(lr=1e-3, warmup_steps=500, warmup_start_factor=0.1)
    out = build_optimizer(model, cfg, num_layers=3, total_steps=5)
    optimizer, scheduler = out["optimizer"], out["lr_scheduler"]["scheduler"]
    head = next(g for g in optimizer.param_groups if g["name"] == "head")
    for _ in range(4):
        optimizer.step()
        scheduler.step()
    assert head["lr"] == pytest.approx(1e-3)  # warm-up ends before the last step
