"""Crash safety: a run SIGKILLed during training or while writing a checkpoint resumes with ``--resume auto``
from its last good checkpoint and ends with the same weights and optimiser state as an uninterrupted run,
bit for bit (CPU, one process: the data order and each sample's augmentation depend only on the seed,
the epoch and the sample)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from conftest import pose_run_args

from sapiens2_ft.cli import main

REPO = Path(__file__).resolve().parent.parent
STEPS = 10  # 4 batches an epoch, a checkpoint every 2 steps


def run_args(coco, model, run_dir) -> list[str]:
    return pose_run_args(coco, model, run_dir, STEPS, "--tracking.logger", "csv", "--export", "false")


@pytest.fixture(scope="module")
def uninterrupted(tiny_coco, tiny_pose308_dir, tmp_path_factory) -> dict:
    run_dir = tmp_path_factory.mktemp("uninterrupted") / "run"
    main(run_args(tiny_coco, tiny_pose308_dir, run_dir))
    return torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)


def killed_run(args: list[str], fault: str, step: int, tmp_path) -> subprocess.CompletedProcess:
    """train.py in a child process with a fault callback from tests/faults.py."""
    config = tmp_path / "fault.yaml"
    config.write_text(yaml.safe_dump({"trainer": {"callbacks": [
        {"class_path": f"faults.{fault}", "init_args": {"step": step}}]}}))
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{REPO / 'tests'}", "SAPIENS2_FT_ALLOW_CLASSES": "faults."}
    return subprocess.run([sys.executable, "train.py", *args, "--config", str(config)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)


def assert_same_state(expected: dict, got: dict) -> None:
    assert got["global_step"] == expected["global_step"] == STEPS
    for key, value in expected["state_dict"].items():
        assert torch.equal(value, got["state_dict"][key]), key
    for a, b in zip(expected["optimizer_states"][0]["state"].values(), got["optimizer_states"][0]["state"].values()):
        for name in a:
            assert torch.equal(a[name], b[name]), name


def test_sigkill_during_training_then_resume_matches_uninterrupted(uninterrupted, tiny_coco, tiny_pose308_dir,
                                                                    tmp_path):
    run_dir = tmp_path / "run"
    args = run_args(tiny_coco, tiny_pose308_dir, run_dir)
    killed = killed_run(args, "KillAtStep", 3, tmp_path)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assert torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == 2  # mid-epoch
    main(args + ["--resume", "auto"])
    assert_same_state(uninterrupted, torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True))


def test_sigkill_while_writing_a_checkpoint_keeps_the_last_good_one(uninterrupted, tiny_coco, tiny_pose308_dir,
                                                                     tmp_path):
    run_dir = tmp_path / "run"
    args = run_args(tiny_coco, tiny_pose308_dir, run_dir)
    killed = killed_run(args, "KillDuringCheckpointWrite", 6, tmp_path)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    checkpoints = run_dir / "checkpoints"
    assert list(checkpoints.glob(".*.tmp-*")), "the interrupted write should have left its temporary file"
    last = torch.load(checkpoints / "last.ckpt", weights_only=True)  # whole, and the one before the kill
    assert last["global_step"] == 4
    main(args + ["--resume", "auto"])
    assert_same_state(uninterrupted, torch.load(checkpoints / "last.ckpt", weights_only=True))
    assert not list(checkpoints.glob(".*.tmp-*"))  # cleaned up by the next successful save
