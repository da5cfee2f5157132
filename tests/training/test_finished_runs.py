"""A finished run is never rewritten: ``--resume auto`` outside a torchrun / SLURM job names the run instead of picking
one, resuming a run that has reached its end is a message, and a run resumed to train further keeps what its earlier
segment recorded (``config.yaml``, ``hparams.yaml``, ``summary.json``) beside its own (``config.resume1.yaml``,
``hparams.resume1.yaml``, ``summary.json``'s ``segments``)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import yaml
from conftest import pose_run_args

from datamodules.errors import Refused
from sapiens2_ft.training.cli import main
from sapiens2_ft.training.run_dir import (earlier_segments, latest_config, next_segment, reached_end,
                                          resolve_resume, segment_file)

JOB_VARIABLES = ("SLURM_JOB_ID", "TORCHELASTIC_RUN_ID", "SAPIENS2_FT_RUN_DIR")


def snapshot(directory: Path) -> dict[str, tuple[bytes, int]]:
    """Every file under ``directory``: its bytes and its modification time (ns); folders by their mtime."""
    found = {}
    for path in sorted(directory.rglob("*")):
        stat = path.lstat()
        found[str(path.relative_to(directory))] = (path.read_bytes() if path.is_file() else b"", stat.st_mtime_ns)
    return found


def without_run_dir(args: list[str]) -> list[str]:
    i = args.index("--run_dir")
    return args[:i] + args[i + 2:]


@pytest.fixture
def finished_in_runs(pose_run, tmp_path, monkeypatch) -> Path:
    """The finished 4-step pose run (wandb, export, summary.json), where ``--resume auto`` looks for it:
    ``runs/pose_coco/<stamp>`` under the working folder; no job around."""
    monkeypatch.chdir(tmp_path)
    for name in JOB_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    run_dir = Path("runs") / "pose_coco" / "20261201-120000"
    shutil.copytree(pose_run[0], run_dir)
    return run_dir


def test_resume_auto_outside_a_job_changes_nothing_in_a_finished_run(finished_in_runs, tiny_coco, tiny_pose308_dir,
                                                                     tmp_path):
    """The issue's command: a shorter run with ``--resume auto`` next to a finished 200-step run took it over."""
    before = snapshot(tmp_path)
    args = without_run_dir(pose_run_args(tiny_coco, tiny_pose308_dir, tmp_path / "unused", 2,
                                         "--trainer.limit_val_batches", "1"))
    with pytest.raises(SystemExit) as err:
        main(args + ["--resume", "auto"])
    message = str(err.value)
    assert "only inside a torchrun or SLURM job" in message and "--resume RUN_DIR" in message
    assert f"latest run of this config with a checkpoint is {finished_in_runs} (finished" in message
    assert snapshot(tmp_path) == before  # every byte and mtime; no new run folder either
    assert os.environ.get("SAPIENS2_FT_RUN_DIR") is None


@pytest.mark.parametrize("how", ["path", "checkpoint", "shorter", "job"])
def test_resuming_a_finished_run_is_a_message_and_changes_nothing(finished_in_runs, tiny_coco, tiny_pose308_dir,
                                                                  tmp_path, monkeypatch, how):
    run_dir = finished_in_runs
    steps = 2 if how == "shorter" else 4  # the run's own end, or one behind it
    args = without_run_dir(pose_run_args(tiny_coco, tiny_pose308_dir, tmp_path / "unused", steps))
    resume = {"path": str(run_dir), "checkpoint": str(run_dir / "checkpoints" / "last.ckpt"), "shorter": str(run_dir),
              "job": "auto"}[how]
    if how == "job":  # a new SLURM job: auto takes the latest run of the config, and that one is finished
        monkeypatch.setenv("SLURM_JOB_ID", "4343")
    before = snapshot(tmp_path)
    with pytest.raises(SystemExit) as err:
        main(args + ["--resume", resume])
    assert str(err.value).startswith(f"--resume: {run_dir} is finished (it has summary.json; its checkpoint is at "
                                     f"step 4, trainer.max_steps {steps} leaves nothing to train)")
    assert "larger --trainer.max_steps" in str(err.value) and "--init_from" in str(err.value)
    assert snapshot(tmp_path) == before


def test_auto_is_kept_where_the_run_is_named_or_a_job_owns_it(finished_in_runs, monkeypatch):
    assert resolve_resume("auto", str(finished_in_runs), "pose_coco")[1] == finished_in_runs
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "none")  # torchrun's value outside an elastic job: not a job
    with pytest.raises(Refused, match="only inside a torchrun or SLURM job"):
        resolve_resume("auto", None, "pose_coco")
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "7")
    assert resolve_resume("auto", None, "pose_coco")[1] == finished_in_runs  # the latest run, as before
    monkeypatch.delenv("TORCHELASTIC_RUN_ID")
    with pytest.raises(Refused, match="runs/other/ holds no run with a checkpoint"):
        resolve_resume("auto", None, "other")


def test_where_a_run_ends():
    assert reached_end(4, 0, 4, None) and reached_end(5, 0, 4, None) and not reached_end(3, 0, 4, None)
    assert not reached_end(4, 1, -1, 2) and reached_end(4, 2, -1, 2)  # by epochs when no step limit is set
    assert reached_end(0, 1000, -1, None) and not reached_end(0, 999, None, None)  # Lightning's default of 1000
    assert not reached_end(10**6, 10**6, -1, -1)  # no limit at all


def test_segment_files_and_history(tmp_path):
    assert segment_file("config.yaml", 0) == "config.yaml" and segment_file("config.yaml", 2) == "config.resume2.yaml"
    assert segment_file("hparams.yaml", 1) == "hparams.resume1.yaml"
    assert next_segment(tmp_path) == 0 and earlier_segments(tmp_path) == []  # no config.yaml: the run's first
    (tmp_path / "config.yaml").write_text("a: 1\n")
    assert next_segment(tmp_path) == 1 and latest_config(tmp_path) == tmp_path / "config.yaml"
    (tmp_path / "config.resume1.yaml").write_text("a: 2\n")
    (tmp_path / "config.resume3.yaml").write_text("a: 3\n")  # a crashed segment's number is not reused
    (tmp_path / "config.resume1.yaml.bak").write_text("")
    assert next_segment(tmp_path) == 4 and latest_config(tmp_path) == tmp_path / "config.resume3.yaml"
    (tmp_path / "summary.json").write_text(json.dumps({"global_step": 6, "segments": [{"global_step": 4}]}))
    assert earlier_segments(tmp_path) == [{"global_step": 4}, {"global_step": 6}]
    (tmp_path / "summary.json").write_text("{not json")
    assert earlier_segments(tmp_path) == [{"unreadable_summary": "{not json"}]


def test_a_run_resumed_to_train_further_keeps_the_earlier_segment(finished_in_runs, tiny_coco, tiny_pose308_dir,
                                                                  capsys):
    run_dir = finished_in_runs
    first = {name: (run_dir / name).read_bytes() for name in ("config.yaml", "hparams.yaml", "summary.json")}
    summary = main(without_run_dir(pose_run_args(tiny_coco, tiny_pose308_dir, run_dir, 6, "--export", "false"))
                   + ["--resume", str(run_dir)])
    assert summary["global_step"] == 6 and summary["config_file"] == "config.resume1.yaml"
    for name, content in first.items():
        if name != "summary.json":
            assert (run_dir / name).read_bytes() == content, name
    assert yaml.safe_load((run_dir / "config.resume1.yaml").read_text())["trainer"]["max_steps"] == 6
    assert yaml.safe_load((run_dir / "config.yaml").read_text())["trainer"]["max_steps"] == 4
    assert (run_dir / "hparams.resume1.yaml").is_file()
    saved = json.loads((run_dir / "summary.json").read_text())
    assert saved["segments"] == [json.loads(first["summary.json"])]  # the first segment's record, whole
    assert saved["global_step"] == 6 and saved["segments"][0]["global_step"] == 4
    assert saved["segments"][0]["config_file"] == "config.yaml"


def test_a_run_that_ended_by_epochs_is_finished_too(tiny_coco, tiny_pose308_dir, tmp_path):
    """No step limit: one epoch (4 steps of 2 of the 8 people). Its last checkpoint is written at the epoch's last
    validation, before Lightning counts the epoch as completed: the fit loop's processed count says it is done."""
    run_dir = tmp_path / "run"
    args = pose_run_args(tiny_coco, tiny_pose308_dir, run_dir, -1, "--trainer.max_epochs", "1", "--tracking.logger",
                         "csv", "--export", "false", "--trainer.check_val_every_n_epoch", "1")
    args[args.index("--trainer.val_check_interval") + 1] = "1.0"
    assert main(args)["global_step"] == 4
    before = snapshot(run_dir)
    with pytest.raises(SystemExit, match="trainer.max_epochs 1 leaves nothing to train"):
        main(args + ["--resume", str(run_dir)])
    assert snapshot(run_dir) == before
