"""``--resume`` restores the whole training state; ``--init_from`` only the weights; mismatches are refused."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
import torch
import yaml
from conftest import pose_run_args
from faults import TrainingCrash

from sapiens2_ft.models.checkpoints import CheckpointError
from sapiens2_ft.tasks.pose.module import PoseModule
from sapiens2_ft.tasks.seg.module import SegmentationModule
from sapiens2_ft.training.cli import main


def logged(run_dir, prefix: str) -> dict[int, tuple[float, ...]]:
    """step -> values of the metrics.csv columns starting with ``prefix`` (the last row of a step wins)."""
    with open(run_dir / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    columns = sorted(k for k in rows[0] if k.startswith(prefix))
    out = {}
    for row in rows:
        if row[columns[0]]:
            out[int(row["step"])] = tuple(float(row[c]) for c in columns)
    return out


def crash_config(tmp_path, step: int):
    path = tmp_path / "crash.yaml"
    path.write_text(yaml.safe_dump({"trainer": {"callbacks": [
        {"class_path": "faults.CrashAtStep", "init_args": {"step": step}}]}}))
    return str(path)


def test_resume_auto_continues_step_and_lr_schedule(pose_run, tiny_coco, tiny_pose308_dir, tmp_path, capsys,
                                                    monkeypatch):
    monkeypatch.setenv("SAPIENS2_FT_ALLOW_CLASSES", "faults.")  # the test callback's module
    full_dir, full = pose_run
    run_dir = tmp_path / "run"
    args = pose_run_args(tiny_coco, tiny_pose308_dir, run_dir, 4, "--export", "false")  # wandb, offline here
    with pytest.raises(TrainingCrash):
        main(args + ["--config", crash_config(tmp_path, 3)])
    assert not (run_dir / "summary.json").exists()
    assert max(logged(run_dir, "lr-")) == 2  # logged through step 2; its checkpoint is the last good one

    resumed_args = [a if a != "false" or args[i - 1] != "--trainer.enable_progress_bar" else "true"
                    for i, a in enumerate(args)]
    summary = main(resumed_args + ["--resume", "auto"])
    out = capsys.readouterr()
    assert f"resuming {run_dir / 'checkpoints' / 'last.ckpt'}: task pose, 17 outputs, step 2" in out.out
    assert summary["global_step"] == 4
    assert "4/4 [" in out.out and "samples_per_s" in out.out  # the step progress bar, ending at the total

    # the same wandb run continues: two run folders (their names hold the start second and, when both started
    # in the same second, a -1 suffix), one run id, read from the run files wandb names run-<id>.wandb
    runs = sorted((run_dir / "wandb").glob("offline-run-*"))
    ids = {f.name[len("run-"):-len(".wandb")] for r in runs for f in r.glob("run-*.wandb")}
    assert len(runs) == 2 and len(ids) == 1, (runs, ids)

    expected, got = logged(full_dir, "lr-"), logged(run_dir, "lr-")
    assert sorted(got) == sorted(expected) == [0, 1, 2, 3]
    for step in expected:  # the schedule continued where it stopped, with every param group
        assert got[step] == pytest.approx(expected[step], rel=1e-6), step


def test_init_from_loads_weights_only_and_starts_at_step_zero(pose_run, tiny_coco, tiny_pose308_dir, tmp_path,
                                                               capsys):
    full_dir, full = pose_run
    checkpoint = full_dir / "checkpoints" / "last.ckpt"
    run_dir = tmp_path / "run"
    summary = main(pose_run_args(tiny_coco, tiny_pose308_dir, run_dir, 2, "--tracking.logger", "csv",
                                 "--export", "false", "--init_from", str(checkpoint)))
    assert "weights only" in capsys.readouterr().out
    assert summary["global_step"] == 2
    assert "init_from: all weights of the checkpoint at step 4" in summary["model"]
    lrs = logged(run_dir, "lr-")
    assert min(lrs) == 0 and lrs[0] == pytest.approx(logged(full_dir, "lr-")[0])  # warm-up starts again

    module = PoseModule(init_from=str(checkpoint), keypoints="coco17", input_size=(256, 192))
    module.configure_model()
    trained = torch.load(checkpoint, weights_only=True)["state_dict"]
    for key, value in module.state_dict().items():
        assert torch.equal(value, trained[key]), key


def test_init_from_refuses_another_task_or_keypoint_set(pose_run, tmp_path):
    checkpoint = str(pose_run[0] / "checkpoints" / "last.ckpt")
    with pytest.raises(CheckpointError, match="holds a pose model, this run trains seg"):
        SegmentationModule(init_from=checkpoint, input_size=(256, 192)).configure_model()
    keypoints = tmp_path / "face3.yaml"
    keypoints.write_text(yaml.safe_dump({"keypoints": ["nose", "left_eye", "right_eye"], "sigmas": [0.03] * 3}))
    with pytest.raises(CheckpointError, match="another keypoint set: 17 keypoints there, 3 here"):
        PoseModule(init_from=checkpoint, keypoints=str(keypoints), input_size=(256, 192)).configure_model()


def test_resume_refuses_another_keypoint_set(pose_run, tiny_coco, tiny_pose308_dir, tmp_path):
    keypoints = tmp_path / "face3.yaml"
    keypoints.write_text(yaml.safe_dump({"keypoints": ["nose", "left_eye", "right_eye"], "sigmas": [0.03] * 3}))
    args = pose_run_args(tiny_coco, tiny_pose308_dir, tmp_path / "run", 6, "--tracking.logger", "csv",
                         "--data.keypoints", str(keypoints), "--resume", str(pose_run[0]))  # 6: not finished
    with pytest.raises(SystemExit, match="--resume: .* another keypoint set"):
        main(args)


def test_resume_path_must_exist_and_excludes_init_from(tiny_coco, tiny_pose308_dir, tmp_path):
    args = pose_run_args(tiny_coco, tiny_pose308_dir, tmp_path / "run")
    with pytest.raises(SystemExit, match="does not exist"):
        main(args + ["--resume", str(tmp_path / "nowhere.ckpt")])
    with pytest.raises(SystemExit, match="give one of them"):
        main(args + ["--resume", "auto", "--init_from", str(tmp_path)])


def test_nan_loss_step_is_skipped_and_counted(tiny_coco, tiny_pose308_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("SAPIENS2_FT_ALLOW_CLASSES", "faults.")
    faults = tmp_path / "nan.yaml"
    faults.write_text(yaml.safe_dump({"trainer": {"callbacks": [
        {"class_path": "faults.NaNAtStep", "init_args": {"step": 1}}]}}))
    run_dir = tmp_path / "run"
    summary = main(pose_run_args(tiny_coco, tiny_pose308_dir, run_dir, 4, "--tracking.logger", "csv",
                                 "--export", "false", "--config", str(faults)))
    assert summary["global_step"] == 4  # the run finished
    assert summary["non_finite_skipped_steps"] == 1
    (event,) = summary["non_finite_events"]
    assert event["step"] == 1 and event["non_finite"] == "loss" and len(event["samples"]) == 2  # image ids
    weights = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"]
    assert all(torch.isfinite(v).all() for v in weights.values())
    assert logged(run_dir, "train/non_finite_skips")[1] == (1.0,)


def test_nan_loss_stops_the_run_when_the_policy_says_so(tiny_coco, tiny_pose308_dir, tmp_path, monkeypatch):
    from sapiens2_ft.training.callbacks.non_finite import NonFiniteError
    from sapiens2_ft.training.cli import train

    monkeypatch.setenv("SAPIENS2_FT_ALLOW_CLASSES", "faults.")
    faults = tmp_path / "nan.yaml"
    faults.write_text(yaml.safe_dump({"trainer": {"callbacks": [
        {"class_path": "faults.NaNAtStep", "init_args": {"step": 1}}]}}))
    message = r"step 1: non-finite loss \(loss nan\); samples of the batch: \[\d+, \d+\]"
    with pytest.raises(NonFiniteError, match=message):  # the library's error (train.py: its message, status 1)
        train(pose_run_args(tiny_coco, tiny_pose308_dir, tmp_path / "run", 4, "--tracking.logger", "csv",
                           "--export", "false", "--config", str(faults), "--non_finite.policy", "stop"))


def test_last_checkpoint_holds_the_final_step_even_between_validations(tiny_coco, tiny_pose308_dir, tmp_path):
    run_dir = tmp_path / "run"
    summary = main(pose_run_args(tiny_coco, tiny_pose308_dir, run_dir, 3, "--tracking.logger", "csv",
                                 "--export", "false"))  # validation every 2 steps: at 2, and the final one at 3
    assert summary["global_step"] == 3
    assert torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == 3


@pytest.fixture(scope="module")
def step_checkpoint_run(tiny_coco, tiny_pose308_dir, tmp_path_factory) -> tuple[Path, list[tuple[str, int]]]:
    """A 5-step run validating every 2 steps with ``checkpoint_every_n_steps`` 1: (run_dir, (file name, step) of
    every checkpoint written)."""
    from sapiens2_ft.training.checkpoint_io import AtomicCheckpointIO

    written = []
    save = AtomicCheckpointIO.save_checkpoint

    def record(self, checkpoint, path, storage_options=None):
        written.append((Path(path).name, checkpoint["global_step"]))
        save(self, checkpoint, path, storage_options)

    run_dir = tmp_path_factory.mktemp("step_checkpoints") / "run"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(AtomicCheckpointIO, "save_checkpoint", record)
        main(pose_run_args(tiny_coco, tiny_pose308_dir, run_dir, 5, "--tracking.logger", "csv",
                           "--export", "false", "--checkpoint_every_n_steps", "1"))
    return run_dir, written


def test_checkpoint_every_n_steps_writes_last_between_validations_once_per_step(step_checkpoint_run):
    _, written = step_checkpoint_run
    last = [step for name, step in written if name == "last.ckpt"]
    # steps 1, 3 and 5 by StepCheckpoint; 2 and 4 by the validations (every 2 steps), each written once
    assert last == [1, 2, 3, 4, 5], written


def test_an_export_of_last_between_validations_carries_that_steps_metrics(step_checkpoint_run, tmp_path):
    """``last.ckpt`` of step 5 was written before the run's closing validation at step 5, so the latest validation
    it records is step 4's: its export's card must hold step 5's metrics (the run's final ones), not step 4's."""
    from model_cards import card_metrics

    from sapiens2_ft.training.hf_export import export_checkpoint

    run_dir, _ = step_checkpoint_run
    validations = [values for _, values in sorted(logged(run_dir, "val/").items())]  # after steps 2, 4 and 5
    assert len(validations) == 3 and validations[1] != validations[2]
    last = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)
    assert last["global_step"] == 5 and last["sapiens2_ft"]["validation"]["step"] == 4
    export = export_checkpoint(run_dir / "checkpoints" / "last.ckpt", tmp_path / "export")
    [metrics] = card_metrics(export).values()
    with open(run_dir / "metrics.csv") as f:
        columns = sorted(k.removeprefix("val/") for k in next(csv.DictReader(f)) if k.startswith("val/"))
    assert metrics == pytest.approx(dict(zip(columns, validations[2])), rel=1e-5)


def test_run_shorter_than_the_validation_interval_still_names_and_exports_its_weights(tiny_coco, tiny_pose308_dir,
                                                                                      tmp_path):
    run_dir = tmp_path / "run"
    summary = main(pose_run_args(tiny_coco, tiny_pose308_dir, run_dir, 1, "--tracking.logger", "csv"))
    last = str(run_dir / "checkpoints" / "last.ckpt")  # one step, validation every 2: only the final one
    assert summary["best_checkpoint"] == summary["last_checkpoint"] == last
    assert summary["best_score"] == summary["metrics"]["AP"]
    assert (run_dir / "export" / "model.safetensors").exists() and summary["export"] == str(run_dir / "export")
