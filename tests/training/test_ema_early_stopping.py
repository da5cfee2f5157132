"""EMA of the weights (against the formula, through checkpoints, export and resume), early stopping across a
resume, and TF32."""

from __future__ import annotations

import pytest
import torch
import yaml
from conftest import pose_run_args
from faults import TrainingCrash
from transformers import AutoModelForPoseEstimation

from sapiens2_ft.training.cli import main, set_tf32

DECAY = 0.6


def callbacks_config(tmp_path, *callbacks) -> str:
    path = tmp_path / f"callbacks{len(list(tmp_path.glob('callbacks*')))}.yaml"
    path.write_text(yaml.safe_dump({"trainer": {"callbacks": [
        {"class_path": f"faults.{name}", "init_args": args} for name, args in callbacks]}}))
    return str(path)


@pytest.fixture(scope="module")
def ema_run(tiny_coco, tiny_pose308_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("ema")
    record = root / "weights.pt"
    config = root / "record.yaml"
    config.write_text(yaml.safe_dump({"trainer": {"callbacks": [
        {"class_path": "faults.RecordWeights", "init_args": {"path": str(record)}}]}}))
    import os
    os.environ["SAPIENS2_FT_ALLOW_CLASSES"] = "faults."
    try:
        summary = main(pose_run_args(tiny_coco, tiny_pose308_dir, root / "run", 4, "--ema.decay", str(DECAY),
                                     "--tracking.logger", "csv", "--config", str(config)))
    finally:
        del os.environ["SAPIENS2_FT_ALLOW_CLASSES"]
    return root / "run", summary, torch.load(record, weights_only=True)


def test_checkpoints_hold_the_average_by_the_ema_formula_and_export_it(ema_run):
    run_dir, summary, per_step = ema_run
    assert len(per_step) == 4
    average = {k: v.clone() for k, v in per_step[0].items()}  # the first update copies the weights
    for weights in per_step[1:]:
        for k, v in weights.items():
            if v.is_floating_point():
                average[k] = DECAY * average[k] + (1 - DECAY) * v
            else:
                average[k] = v.clone()
    last = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)
    floats = [k for k, v in average.items() if v.is_floating_point()]
    moved = [k for k in floats if not torch.equal(per_step[-1][k], per_step[0][k])]
    assert moved, "training changed no weight"
    for k in floats:
        torch.testing.assert_close(last["state_dict"][k], average[k], rtol=1e-5, atol=1e-7)
    assert any(not torch.allclose(last["state_dict"][k], per_step[-1][k]) for k in moved)  # not the raw weights
    exported = AutoModelForPoseEstimation.from_pretrained(run_dir / "export").state_dict()
    best = torch.load(summary["best_checkpoint"], weights_only=True)
    for k, v in exported.items():  # the export is the averaged weights
        torch.testing.assert_close(v, best["state_dict"][f"model.{k}"])
    assert any(not torch.equal(best["state_dict"][k], best["current_model_state"][k]) for k in moved)


def test_resume_restores_the_average_and_the_weights_exactly(ema_run, tiny_coco, tiny_pose308_dir, tmp_path,
                                                             monkeypatch):
    monkeypatch.setenv("SAPIENS2_FT_ALLOW_CLASSES", "faults.")
    run_dir = tmp_path / "run"
    args = pose_run_args(tiny_coco, tiny_pose308_dir, run_dir, 4, "--ema.decay", str(DECAY), "--tracking.logger",
                         "csv")
    with pytest.raises(TrainingCrash):
        main(args + ["--config", callbacks_config(tmp_path, ("CrashAtStep", {"step": 3}))])
    main(args + ["--resume", "auto"])
    full = torch.load(ema_run[0] / "checkpoints" / "last.ckpt", weights_only=True)
    resumed = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)
    for part in ("state_dict", "current_model_state", "averaging_state"):
        assert full[part].keys() == resumed[part].keys()
        for k, v in full[part].items():
            assert torch.equal(v, resumed[part][k]), (part, k)


def test_early_stopping_stops_where_it_would_have_after_a_resume(tiny_coco, tiny_pose308_dir, tmp_path,
                                                                 monkeypatch):
    """Validation every 2 steps; no change counts as an improvement (min_delta huge), patience 1: the run stops
    at the second validation, step 4 of 8. Resumed at step 3, the restored counters stop it at step 4 too (a
    fresh counter would take the step-4 validation as its first and stop at step 6)."""
    monkeypatch.setenv("SAPIENS2_FT_ALLOW_CLASSES", "faults.")
    stop = ["--early_stopping.patience", "1", "--early_stopping.min_delta", "1e9", "--tracking.logger", "csv",
            "--export", "false"]
    whole = main(pose_run_args(tiny_coco, tiny_pose308_dir, tmp_path / "whole", 8, *stop))
    assert whole["global_step"] == 4
    args = pose_run_args(tiny_coco, tiny_pose308_dir, tmp_path / "run", 8, *stop)
    with pytest.raises(TrainingCrash):
        main(args + ["--config", callbacks_config(tmp_path, ("CrashAtStep", {"step": 3}))])
    assert main(args + ["--resume", "auto"])["global_step"] == 4


def test_ema_refuses_fsdp2(tiny_coco, tiny_pose308_dir, tmp_path):
    with pytest.raises(SystemExit, match="not sharded"):
        main(pose_run_args(tiny_coco, tiny_pose308_dir, tmp_path / "run", 2, "--ema.decay", "0.9",
                           "--config", "strategy/fsdp2.yaml"))


def test_tf32_is_set_on_gpus_only(monkeypatch):
    before = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    try:
        set_tf32(True)
        assert (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32) == before  # no GPU: as is
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        set_tf32(True)
        assert torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32
        set_tf32(False)
        assert not torch.backends.cuda.matmul.allow_tf32 and not torch.backends.cudnn.allow_tf32
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before
