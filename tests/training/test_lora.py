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
