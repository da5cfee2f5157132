"""Multi-task pretraining (the demo backbone's recipe): a short run, its checkpoint's names, and a resume."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from sapiens2_ft.tasks.multitask.module import MultiTaskModule
from sapiens2_ft.tasks.multitask.tasks import PRETRAINING_DENSE_TASKS
from sapiens2_ft.training.cli import main
from tool_scripts import load_tool


def _args(dense_root, run_dir, steps: int) -> list[str]:
    return ["--config", "pretrain_demo_backbone.yaml", "--run_dir", str(run_dir), "--data.root", str(dense_root),
            "--data.synthetic", "null", "--model.size", "tiny", "--data.batch_size", "2", "--data.val_batch_size", "2",
            "--data.num_workers", "0", "--trainer.max_steps", str(steps), "--trainer.val_check_interval", "2",
            "--trainer.limit_val_batches", "1", "--trainer.log_every_n_steps", "1",
            "--trainer.enable_progress_bar", "false",
            "--model.scale.compile", "false"]  # the recipe compiles its blocks: seconds a run that tests do not need


@pytest.mark.slow  # two runs of all five heads (about 9 s)
def test_pretraining_run_keeps_one_backbone_and_resumes(dense_root, tmp_path):
    run_dir = tmp_path / "run"
    summary = main(_args(dense_root, run_dir, 2))
    assert summary["global_step"] == 2
    assert {"pose_AP", "seg_mIoU", "normal_angle_mean", "pointmap_l2", "matting_sad", "loss"} <= set(summary["metrics"])
    assert json.loads((run_dir / "predictions.json").read_text())  # the pose head's COCO results
    data = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)
    assert data["sapiens2_ft"]["task"] == "multitask"
    keys = list(data["state_dict"])
    # The names a resumed pretraining run (and tools/pretrain_demo_backbone.py) relies on.
    assert any(k.startswith("model.backbone.backbone.") for k in keys)
    for task in ("pose", *PRETRAINING_DENSE_TASKS):
        assert any(k.startswith(f"model.tasks.{task}.") for k in keys), task
    assert all(k.startswith(("model.backbone.backbone.", "model.tasks.")) for k in keys)
    backbone_keys = {k.removeprefix("model.backbone.backbone.") for k in keys if k.startswith("model.backbone.")}
    assert not any(k.split(".", 3)[3] in backbone_keys for k in keys if k.startswith("model.tasks."))  # stored once

    resumed = main(_args(dense_root, tmp_path / "elsewhere", 3) + ["--resume", str(run_dir)])
    assert resumed["global_step"] == 3 and resumed["run_dir"] == str(run_dir)

    # The kept backbone, with its heads beside it: continued pretraining from it starts with the trained heads.
    tool = load_tool("pretrain_demo_backbone")
    data = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)
    tool.save_backbone(run_dir / "checkpoints" / "last.ckpt", tmp_path / "kept", {"fit_wall_time_s": 12.5})
    # The compute behind it: the runs of the backbone it started from, then this one, added up.
    start = data["hyper_parameters"]["pretrained"]
    before = json.loads((Path(start) / "PRETRAINING.json").read_text())
    kept = json.loads((tmp_path / "kept" / "PRETRAINING.json").read_text())
    assert kept["runs"][:-1] == before["runs"] and kept["runs"][-1]["steps"] == 3
    assert kept["runs"][-1]["started_from"] == start and kept["runs"][-1]["lr"] == data["hyper_parameters"]["optim"]["lr"]
    assert kept["total_steps"] == before["total_steps"] + 3 == sum(r["steps"] for r in kept["runs"])
    assert kept["total_samples"] == kept["total_steps"] * 2  # the run's batch size
    assert kept["total_fit_wall_time_s"] == pytest.approx(before["total_fit_wall_time_s"] + 12.5)
    # Saved again (a checkpoint kept mid-run, then the run's end), from a start that holds this run: counted once.
    (tmp_path / "kept2").mkdir()
    again = dict(data, hyper_parameters={**data["hyper_parameters"], "pretrained": str(tmp_path / "kept")})
    torch.save(again, run_dir / "checkpoints" / "again.ckpt")
    tool.save_backbone(run_dir / "checkpoints" / "again.ckpt", tmp_path / "kept2", {"fit_wall_time_s": 20.0})
    twice = json.loads((tmp_path / "kept2" / "PRETRAINING.json").read_text())
    assert len(twice["runs"]) == len(kept["runs"]) and twice["total_steps"] == kept["total_steps"]
    assert twice["total_fit_wall_time_s"] == pytest.approx(before["total_fit_wall_time_s"] + 20.0)
    continued = MultiTaskModule(pretrained=str(tmp_path / "kept"))
    continued.configure_model()
    state = continued.state_dict()
    assert set(state) == set(data["state_dict"])
    for key, value in data["state_dict"].items():  # the heads as saved, in bf16
        expected = value.to(torch.bfloat16).float() if key.startswith("model.tasks.") and value.is_floating_point() \
            else value
        assert torch.equal(state[key], expected), key
    assert any("pretraining heads loaded" in note for note in continued.load_report.notes)
    other = MultiTaskModule(pretrained=str(tmp_path / "kept"), input_size=(128, 96))  # the pointmap MLP differs
    other.configure_model()
    assert any("pretraining heads not loaded" in note for note in other.load_report.notes)
    head = "model.tasks.seg.decode_head.predictor.weight"  # fits, but not loaded: all heads or none
    assert not torch.equal(other.state_dict()[head], data["state_dict"][head])


def test_the_attention_implementation_reaches_the_shared_backbone():
    module = MultiTaskModule(size="tiny", input_size=(128, 96), attn_implementation="eager")
    module.configure_model()
    assert module.backbone_model().config._attn_implementation == "eager"
    for task in module.task_modules.values():
        assert task.model.config._attn_implementation == "eager"


def test_options_pretraining_cannot_take_are_reported_together():
    from sapiens2_ft.tasks.base import ConfigProblems

    assert MultiTaskModule.check_options(size="mini") == []
    with pytest.raises(ConfigProblems) as err:
        MultiTaskModule(init_from="runs/x/last.ckpt", lora={"rank": 4}, task_weights={"depth": 1.0})
    problems = err.value.problems
    assert len(problems) == 3
    assert any(p.startswith("model.init_from") for p in problems) and any("model.lora" in p for p in problems)
    assert any("model.task_weights: unknown names ['depth']" in p for p in problems)
