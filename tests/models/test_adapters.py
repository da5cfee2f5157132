"""Freezing and LoRA: which parameters train, the errors for bad settings, and the merge of adapters into plain
weights against peft's own forward."""

from __future__ import annotations

import pytest
import torch
from transformers import Sapiens2ForPoseEstimation

from sapiens2_ft.models.adapters import LoraOptions, adapt, merge_lora
from sapiens2_ft.tasks.pose.module import PoseModule


def pose_model(**kwargs) -> torch.nn.Module:
    module = PoseModule(size="tiny", keypoints="coco17", input_size=(64, 48), **kwargs)
    module.configure_model()
    return module.model


def trainable(model) -> set[str]:
    return {n for n, p in model.named_parameters() if p.requires_grad}


def test_freeze_backbone_trains_the_head_only():
    model = pose_model(freeze="backbone")
    assert trainable(model) == {n for n, _ in model.named_parameters() if n.startswith("decode_head.")}


def test_freeze_first_blocks_keeps_the_rest_training():
    model = pose_model(freeze="first_n_blocks", freeze_blocks=2)
    frozen = {n for n, _ in model.named_parameters()} - trainable(model)
    assert any(".embeddings." in n for n in frozen)
    assert {int(n.split(".layer.")[1].split(".")[0]) for n in frozen if ".layer." in n} == {0, 1}
    assert any(".layer.2." in n for n in trainable(model)) and any(".norm." in n for n in trainable(model))


@pytest.mark.parametrize("kwargs,message", [
    ({"freeze": "half"}, "model.freeze: 'half' is not one of"),
    ({"freeze": "first_n_blocks", "freeze_blocks": 9}, "model.freeze_blocks: 9 is not between 1 and"),
    ({"freeze": "backbone", "lora": {"rank": 4}}, "LoRA already freezes"),
    ({"lora": {"rank": 4, "target_modules": ["qkv"]}}, "model.lora.target_modules"),
])
def test_bad_settings_name_the_key(kwargs, message):
    with pytest.raises(ValueError, match=message):
        pose_model(**kwargs)


def test_lora_trains_adapters_and_head_and_merges_to_the_same_outputs():
    torch.manual_seed(0)
    model = pose_model(lora={"rank": 4, "alpha": 8.0})
    names = trainable(model)
    adapters = {n for n in names if ".lora_" in n}
    assert names - adapters == {n for n, _ in model.named_parameters() if n.startswith("decode_head.")}
    assert len(adapters) == 2 * 7 * 4  # A and B, 7 linear layers, 4 blocks
    with torch.no_grad():  # trained adapters: B is no longer zero
        for name, param in model.named_parameters():
            if ".lora_B." in name:
                param.normal_(0, 0.1)
    model.eval()
    x = torch.randn(2, 3, 64, 48)
    plain = Sapiens2ForPoseEstimation(model.config).eval()
    plain.load_state_dict(merge_lora(model.state_dict(), alpha=8.0, rank=4))
    with torch.no_grad():
        with_adapters, merged = model(x).heatmaps, plain(x).heatmaps
        untouched = Sapiens2ForPoseEstimation(model.config).eval()
        untouched.load_state_dict({k.replace(".base_layer", ""): v for k, v in model.state_dict().items()
                                   if ".lora_" not in k})
        assert not torch.allclose(untouched(x).heatmaps, with_adapters, atol=1e-3)  # the adapters matter
    torch.testing.assert_close(merged, with_adapters, rtol=1e-4, atol=1e-5)


def test_adapt_leaves_a_model_without_options_as_it_was():
    model = pose_model()
    before = {n for n, _ in model.named_parameters()}
    adapt(model, lora=LoraOptions(rank=0))
    assert trainable(model) == before == {n for n, _ in model.named_parameters()}


def test_adapters_take_their_blocks_layer_decay():
    from sapiens2_ft.models.optim import OptimConfig, param_groups

    model = pose_model(lora={"rank": 4})
    groups = param_groups(model, OptimConfig(lr=1.0, layer_decay=0.5), num_layers=4)
    by_param = {id(p): g for g in groups for p in g["params"]}
    for name, param in model.named_parameters():
        if ".lora_" in name:
            block = int(name.split(".layer.")[1].split(".")[0])
            assert by_param[id(param)]["lr"] == pytest.approx(0.5 ** (4 - block)), name
    assert not any(not p.requires_grad for g in groups for p in g["params"])  # frozen weights get no group
