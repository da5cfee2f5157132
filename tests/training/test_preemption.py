"""Preemption: a training process sent SIGUSR1 or SIGTERM writes ``last.ckpt`` at the next optimiser step, requeues
its SLURM job (a stub ``scontrol`` records the call) and exits with status 75; ``--resume auto`` then ends with the
same weights and optimiser state as an uninterrupted run, bit for bit (CPU, one process)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
import torch
import yaml
from conftest import pose_run_args
import forked

from datamodules.errors import BadConfig
from sapiens2_ft.training.callbacks.preemption import PreemptionConfig, parse_signals, slurm_job_id
from sapiens2_ft.training.cli import main

STEPS = 8  # 4 batches an epoch, a validation (and last.ckpt) every 2 steps


def run_args(coco, model, run_dir) -> list[str]:
    return pose_run_args(coco, model, run_dir, STEPS, "--tracking.logger", "csv", "--export", "false")


def test_signal_names_and_the_slurm_job_id(monkeypatch):
    assert parse_signals(PreemptionConfig().signals) == [signal.SIGUSR1, signal.SIGTERM]
    assert parse_signals(["usr2", "SIGTERM"]) == [signal.SIGUSR2, signal.SIGTERM]
    with pytest.raises(BadConfig, match="preemption.signals: SIGKILL, SIGNOPE cannot be handled"):
        parse_signals(["SIGKILL", "SIGNOPE"])
    for name in ("SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID"):
        monkeypatch.delenv(name, raising=False)
    assert slurm_job_id() is None
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    assert slurm_job_id() == "4242"
    monkeypatch.setenv("SLURM_ARRAY_JOB_ID", "4200")
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "7")
    assert slurm_job_id() == "4200_7"  # an array task requeues itself only


@pytest.fixture(scope="module")
def uninterrupted(tiny_coco, tiny_pose308_dir, tmp_path_factory) -> dict:
    run_dir = tmp_path_factory.mktemp("uninterrupted") / "run"
    main(run_args(tiny_coco, tiny_pose308_dir, run_dir))
    return torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)


def preempted_run(args: list[str], signum: int, step: int, tmp_path: Path) -> tuple[subprocess.CompletedProcess, str]:
    """The training in a process of its own under a fake SLURM job, sent ``signum`` once it reaches optimiser ``step``;
    returns the finished process and what the stub ``scontrol`` was called with."""
    marker = tmp_path / "at_step"
    config = tmp_path / "pause.yaml"
    config.write_text(yaml.safe_dump({"trainer": {"callbacks": [
        {"class_path": "faults.PauseAtStep", "init_args": {"step": step, "marker": str(marker)}}]}}))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "scontrol_calls"
    (bin_dir / "scontrol").write_text(f'#!/bin/sh\necho "$@" >> {calls}\n')
    (bin_dir / "scontrol").chmod(0o755)
    env = {**os.environ, "SAPIENS2_FT_ALLOW_CLASSES": "faults.", "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
           "SLURM_JOB_ID": "4242"}
    run = forked.train([*args, "--config", str(config)], tmp_path / "logs", env)  # a process of its own (tests/forked.py)
    try:
        deadline = time.time() + 300
        while not marker.exists() and run.poll() is None and time.time() < deadline:
            time.sleep(0.2)
        if run.poll() is None and marker.exists():
            os.kill(run.pid, signum)  # from outside, as SLURM or a scheduler sends it
            Path(str(marker) + ".go").write_text("")
        done = run.wait(timeout=300)
    finally:
        run.kill()
    return done, calls.read_text() if calls.exists() else ""


@pytest.mark.slow
@pytest.mark.parametrize("signum,step", [
    (signal.SIGUSR1, 3),  # between validations: written by the preemption callback
    (signal.SIGTERM, 4),  # at a validation: its last.ckpt is the one, the run stops before the next batch
])
def test_a_preempted_run_requeues_and_resumes_bit_exact(uninterrupted, tiny_coco, tiny_pose308_dir, tmp_path,
                                                       signum, step):
    run_dir = tmp_path / "run"
    checkpoints = run_dir / "checkpoints"
    args = run_args(tiny_coco, tiny_pose308_dir, run_dir)
    done, scontrol = preempted_run(args, signum, step, tmp_path)
    assert done.returncode == PreemptionConfig().exit_code, done.stderr[-3000:]
    name = signal.Signals(signum).name
    assert f"preempted: {name} received: stopped at step {step} with {checkpoints / 'last.ckpt'} written; " \
           "SLURM job 4242 requeued; continue with --resume auto (exit status 75)" in done.stdout
    assert scontrol == "requeue 4242\n"
    assert torch.load(checkpoints / "last.ckpt", weights_only=True)["global_step"] == step
    assert not list(checkpoints.glob(".*.tmp-*")) and not (run_dir / "summary.json").exists()

    main(args + ["--resume", "auto"])
    got = torch.load(checkpoints / "last.ckpt", weights_only=True)
    assert got["global_step"] == uninterrupted["global_step"] == STEPS
    for key, value in uninterrupted["state_dict"].items():
        assert torch.equal(value, got["state_dict"][key]), key
    for a, b in zip(uninterrupted["optimizer_states"][0]["state"].values(), got["optimizer_states"][0]["state"].values()):
        for entry in a:
            assert torch.equal(a[entry], b[entry]), entry
