"""Elastic restarts: under ``torchrun --max-restarts 1`` a rank lost mid-run restarts the group, and
``--resume auto`` continues from the last checkpoint: the run ends at the same step, with every step's loss that
of a run that was not interrupted (2 CPU processes, gloo; the uninterrupted run's ranks are forked, tests/forked.py)."""

from __future__ import annotations

import csv
import math
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from conftest import pose_run_args
import forked

REPO = Path(__file__).resolve().parents[2]
STEPS = 6  # 2 ranks x 1 image a batch: 2 batches an epoch; a validation and last.ckpt at every epoch's end


def ddp_args(coco, model, run_dir: Path) -> list[str]:
    return pose_run_args(coco, model, run_dir, STEPS, "--tracking.logger", "csv", "--export", "false",
                         "--data.batch_size", "1", "--trainer.devices", "2",
                         "--trainer.strategy", "ddp", "--resume", "auto")


def torchrun(coco, model, run_dir: Path, tmp_path: Path, exit_at: int) -> subprocess.CompletedProcess:
    config = tmp_path / "exit.yaml"
    config.write_text(yaml.safe_dump({"trainer": {"callbacks": [
        {"class_path": "faults.ExitOnceAtStep", "init_args": {"step": exit_at, "rank": 1}}]}}))
    args = [*ddp_args(coco, model, run_dir), "--config", str(config)]
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{REPO / 'tests'}", "SAPIENS2_FT_ALLOW_CLASSES": "faults.",
           "OMP_NUM_THREADS": "1", "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}  # see docs/reliability.md
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "--max-restarts", "1",
           "--monitor-interval", "0.5", "train.py", *args]
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=600)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        pytest.fail(f"torchrun timed out\n{proc.communicate()[1][-3000:]}")
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def train_losses(run_dir: Path) -> dict[int, float]:
    with open(run_dir / "metrics.csv") as f:
        return {int(r["step"]): float(r["train/loss"]) for r in csv.DictReader(f) if r.get("train/loss")}


@pytest.mark.slow
@pytest.mark.distributed
def test_a_rank_lost_once_restarts_the_group_and_the_run_resumes(tiny_coco, tiny_pose308_dir, tmp_path):
    full_dir = tmp_path / "uninterrupted"  # the reference: 2 ranks forked from the test's fork server
    forked.train_ranks(ddp_args(tiny_coco, tiny_pose308_dir, full_dir), tmp_path / "uninterrupted_logs")

    run_dir = tmp_path / "restarted"
    done = torchrun(tiny_coco, tiny_pose308_dir, run_dir, tmp_path, exit_at=3)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "--resume auto: no earlier run" in done.stdout  # the first attempt started the run
    assert "failed (exitcode: 1) local_rank: 1" in done.stderr  # rank 1 was lost once ...
    assert "resuming " in done.stdout and ": task pose, 17 outputs, step 2" in done.stdout  # ... the group resumed

    checkpoint = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)
    assert checkpoint["global_step"] == STEPS
    losses, expected = train_losses(run_dir), train_losses(full_dir)
    assert sorted(losses) == list(range(STEPS)) and all(math.isfinite(v) for v in losses.values())
    # every step's loss (on CPU, the steps after the restart too) is the uninterrupted run's, bit for bit
    assert losses == expected
