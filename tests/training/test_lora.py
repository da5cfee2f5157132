"""LoRA through the whole run: only adapters and head change, the export merges the adapters and equals the
module, and ``--resume`` restores adapters and optimiser state bit for bit."""

from __future__ import annotations

import pytest
import torch
import yaml
from conftest import pose_run_args
from faults import TrainingCrash
from transformers import AutoModelForPoseEstimation, Sapiens2ForPoseEstimation

from sapiens2_ft.tasks.pose.module import PoseModule
from sapiens2_ft.training.cli import main

LORA = ["--model.lora.rank", "4", "--model.lora.alpha", "8", "--tracking.logger", "csv"]


@pytest.fixture(scope="module")
def lora_run(tiny_coco, tiny_pose308_dir, tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("lora") / "run"
    return run_dir, main(pose_run_args(tiny_coco, tiny_pose308_dir, run_dir, 4, *LORA))


def state(checkpoint) -> dict:
    return torch.load(checkpoint, weights_only=True)


def test_lora_changes_adapters_and_head_only_and_exports_merged(lora_run, tiny_pose308_dir):
    run_dir, summary = lora_run
    weights = state(summary["best_checkpoint"])["state_dict"]
    pretrained = Sapiens2ForPoseEstimation.from_pretrained(tiny_pose308_dir).state_dict()
    base = {k[len("model."):].replace(".base_layer", ""): v for k, v in weights.items() if ".lora_" not in k}
    backbone = [k for k in base if k.startswith("model.") and k in pretrained]
    assert backbone and all(torch.equal(base[k], pretrained[k]) for k in backbone)  # frozen
    assert any(v.abs().sum() > 0 for k, v in weights.items() if ".lora_B." in k)  # trained (B starts at 0)

    model = AutoModelForPoseEstimation.from_pretrained(run_dir / "export").eval()
    assert not any(".lora_" in k or "base_layer" in k for k in model.state_dict())
    module = PoseModule(pretrained=str(tiny_pose308_dir), keypoints="coco17", input_size=(256, 192),
                        lora={"rank": 4, "alpha": 8.0})
    module.configure_model()
    module.load_state_dict(weights)
    module.eval()
    x = torch.randn(2, 3, 256, 192)
    with torch.no_grad():
        torch.testing.assert_close(model(x).heatmaps, module(x)["heatmaps"], rtol=1e-4, atol=1e-5)


def test_resume_restores_adapters_and_optimiser_exactly(lora_run, tiny_coco, tiny_pose308_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("SAPIENS2_FT_ALLOW_CLASSES", "faults.")
    crash = tmp_path / "crash.yaml"
    crash.write_text(yaml.safe_dump({"trainer": {"callbacks": [
        {"class_path": "faults.CrashAtStep", "init_args": {"step": 3}}]}}))
    run_dir = tmp_path / "run"
    args = pose_run_args(tiny_coco, tiny_pose308_dir, run_dir, 4, *LORA)
    with pytest.raises(TrainingCrash):
        main(args + ["--config", str(crash)])
    main(args + ["--resume", "auto"])
    full, resumed = state(lora_run[0] / "checkpoints" / "last.ckpt"), state(run_dir / "checkpoints" / "last.ckpt")
    assert full["global_step"] == resumed["global_step"] == 4
    assert full["state_dict"].keys() == resumed["state_dict"].keys()
    for key, value in full["state_dict"].items():
        assert torch.equal(value, resumed["state_dict"][key]), key
    for a, b in zip(full["optimizer_states"][0]["state"].values(), resumed["optimizer_states"][0]["state"].values()):
        assert all(torch.equal(a[k], b[k]) for k in a)


BF16 = [*LORA, "--trainer.precision", "bf16-mixed", "--trainer.max_steps", "6"]


@pytest.fixture(scope="module")
def bf16_runs(tiny_coco, tiny_pose308_dir, tmp_path_factory) -> dict:
    """The same LoRA run under bf16 autocast twice: frozen weights kept in fp32, and stored in bf16 (``auto``)."""
    root = tmp_path_factory.mktemp("lora_bf16")
    return {frozen: (root / frozen, main(pose_run_args(tiny_coco, tiny_pose308_dir, root / frozen, 6, *BF16,
                                                       "--model.frozen_dtype", frozen)))
            for frozen in ("float32", "auto")}


def train_losses(run_dir) -> list[float]:
    import csv

    with open(run_dir / "metrics.csv") as f:
        return [float(r["train/loss"]) for r in csv.DictReader(f) if r.get("train/loss")]


def test_frozen_bf16_trains_exactly_as_fp32_frozen_weights_under_autocast(bf16_runs, tiny_pose308_dir):
    """Autocast computes fp32 frozen weights in bf16 anyway, so storing them in bf16 changes nothing but memory:
    the loss curve and every trained parameter are equal (measured: no difference at all, so none is allowed)."""
    (fp32_dir, _), (bf16_dir, _) = bf16_runs["float32"], bf16_runs["auto"]
    assert len(train_losses(fp32_dir)) == 6 and train_losses(fp32_dir) == train_losses(bf16_dir)
    fp32, bf16 = state(fp32_dir / "checkpoints" / "last.ckpt"), state(bf16_dir / "checkpoints" / "last.ckpt")
    frozen = {k for k, v in bf16["state_dict"].items() if v.dtype == torch.bfloat16}
    assert frozen and all(".base_layer." in k for k in frozen)  # the frozen linear layers, and only they
    assert all(fp32["state_dict"][k].dtype == torch.float32 for k in frozen)
    for key, value in bf16["state_dict"].items():
        if key not in frozen:
            assert value.dtype == torch.float32 and torch.equal(value, fp32["state_dict"][key]), key
    # AdamW state for the trained parameters only, fp32
    moments = [s["exp_avg"] for s in bf16["optimizer_states"][0]["state"].values()]
    module = PoseModule(pretrained=str(tiny_pose308_dir), keypoints="coco17", lora={"rank": 4, "alpha": 8.0})
    module.configure_model()
    assert len(moments) == sum(p.requires_grad for p in module.parameters())
    assert all(m.dtype == torch.float32 for m in moments)


def test_frozen_bf16_export_merges_in_fp32_and_predicts(bf16_runs, tiny_pose308_dir):
    """The merge, ``W + alpha / r x B A``, is done in fp32 on the stored bf16 ``W`` (exact: fp32 holds every bf16
    value). Against the merge of the fp32-frozen run (the same adapters), each weight differs by the rounding of
    ``W`` to bf16, at most 2^-8 of the layer's largest weight (measured 0.32%), and the heatmaps by 5e-5 of their
    range here; the export loads in transformers and gives the module's outputs."""
    (fp32_dir, _), (bf16_dir, summary) = bf16_runs["float32"], bf16_runs["auto"]
    exported = AutoModelForPoseEstimation.from_pretrained(bf16_dir / "export").eval()
    reference = AutoModelForPoseEstimation.from_pretrained(fp32_dir / "export").eval()
    ours, theirs = exported.state_dict(), reference.state_dict()
    assert {v.dtype for v in ours.values() if v.is_floating_point()} == {torch.float32}
    rounded = 0
    for key, value in ours.items():
        if value.is_floating_point():
            bound = 2.0**-8 * theirs[key].abs().max()
            assert (value - theirs[key]).abs().max() <= bound, key
            rounded += not torch.equal(value, theirs[key])
    weights = state(summary["best_checkpoint"])["state_dict"]  # what the export holds
    adapted = [k for k in weights if k.endswith("base_layer.weight")]
    assert rounded == len(adapted) > 0  # each LoRA-adapted linear layer, and no other weight (their biases are zero)

    module = PoseModule(pretrained=str(tiny_pose308_dir), keypoints="coco17", input_size=(256, 192),
                        lora={"rank": 4, "alpha": 8.0})
    module.configure_model()  # no trainer: the frozen weights load into fp32 ones
    module.load_state_dict(weights)
    module.eval()
    x = torch.randn(2, 3, 256, 192)
    with torch.no_grad():
        heatmaps = exported(x).heatmaps
        torch.testing.assert_close(heatmaps, module(x)["heatmaps"], rtol=1e-4, atol=1e-5)
        gap = (heatmaps - reference(x).heatmaps).abs().max() / heatmaps.abs().max()
    assert 0 < gap < 2e-3
