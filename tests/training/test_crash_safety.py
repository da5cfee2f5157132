"""Crash safety: a run SIGKILLed during training or while writing a checkpoint resumes with ``--resume auto``
from its last good checkpoint and ends with the same weights and optimiser state as an uninterrupted run,
bit for bit (CPU, one process: the data order and each sample's augmentation depend only on the seed,
the epoch and the sample)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest
import torch
import yaml
from conftest import pose_run_args
import forked

from sapiens2_ft.training.cli import main

STEPS = 10  # 4 batches an epoch, a checkpoint every 2 steps


def run_args(coco, model, run_dir) -> list[str]:
    return pose_run_args(coco, model, run_dir, STEPS, "--tracking.logger", "csv", "--export", "false")


@pytest.fixture(scope="module")
def uninterrupted(tiny_coco, tiny_pose308_dir, tmp_path_factory) -> dict:
    run_dir = tmp_path_factory.mktemp("uninterrupted") / "run"
    main(run_args(tiny_coco, tiny_pose308_dir, run_dir))
    return torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)


def killed_run(args: list[str], fault: str, step: int, tmp_path) -> subprocess.CompletedProcess:
    """The training in a process of its own (tests/forked.py) with a fault callback from tests/faults.py."""
    config = tmp_path / "fault.yaml"
    config.write_text(yaml.safe_dump({"trainer": {"callbacks": [
        {"class_path": f"faults.{fault}", "init_args": {"step": step}}]}}))
    env = {**os.environ, "SAPIENS2_FT_ALLOW_CLASSES": "faults."}
    return forked.train([*args, "--config", str(config)], tmp_path / "logs", env).wait(timeout=300)


def assert_same_state(expected: dict, got: dict) -> None:
    assert got["global_step"] == expected["global_step"] == STEPS
    for key, value in expected["state_dict"].items():
        assert torch.equal(value, got["state_dict"][key]), key
    for a, b in zip(expected["optimizer_states"][0]["state"].values(), got["optimizer_states"][0]["state"].values()):
        for name in a:
            assert torch.equal(a[name], b[name]), name


@pytest.mark.parametrize("fault,step,last_good,extra", [
    ("KillAtStep", 3, 2, []),  # killed mid-epoch: resume from the step-2 checkpoint
    ("KillDuringCheckpointWrite", 6, 4, []),  # killed halfway through writing step 6: step 4 stays whole
    # a checkpoint between validations (written at the end of a training batch, not of a validation)
    ("KillAtStep", 4, 3, ["--checkpoint_every_n_steps", "1"]),
])
@pytest.mark.slow
def test_sigkill_then_resume_matches_uninterrupted(uninterrupted, tiny_coco, tiny_pose308_dir, tmp_path, fault, step,
                                                   last_good, extra):
    run_dir = tmp_path / "run"
    checkpoints = run_dir / "checkpoints"
    args = run_args(tiny_coco, tiny_pose308_dir, run_dir) + extra
    killed = killed_run(args, fault, step, tmp_path)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assert torch.load(checkpoints / "last.ckpt", weights_only=True)["global_step"] == last_good
    # only an interrupted write leaves its temporary file behind
    assert bool(list(checkpoints.glob(".*.tmp-*"))) == (fault == "KillDuringCheckpointWrite")
    main(args + ["--resume", "auto"])
    assert_same_state(uninterrupted, torch.load(checkpoints / "last.ckpt", weights_only=True))
    assert not list(checkpoints.glob(".*.tmp-*"))  # cleaned up by the next successful save


def test_distributed_checkpoint_swap_and_the_fallback_a_crash_leaves(tmp_path):
    from sapiens2_ft.training.checkpoint_io import last_good, swap_in_directory
    from sapiens2_ft.training.run_dir import checkpoint_candidates

    checkpoints = tmp_path / "run" / "checkpoints"
    last, partial = checkpoints / "last.ckpt", checkpoints / "last.ckpt.partial"
    for directory, step in ((last, "4"), (partial, "6")):
        directory.mkdir(parents=True)
        (directory / "step").write_text(step)
    swap_in_directory(partial, last)
    assert (last / "step").read_text() == "6" and not partial.exists() and not (checkpoints / "last.ckpt.old").exists()

    last.rename(checkpoints / "last.ckpt.old")  # a crash between the two renames of the next swap
    assert last_good(last) == checkpoints / "last.ckpt.old"
    assert checkpoint_candidates(tmp_path / "run")[0] == checkpoints / "last.ckpt.old"  # what --resume tries first

    # The resumed run's next save: the .old checkpoint, the only whole one, stays until the new one is in place.
    partial.mkdir()
    (partial / "step").write_text("8")
    removed = []
    real_replace = os.replace

    def replace_and_check(source, target):
        assert (checkpoints / "last.ckpt.old" / "step").exists() or last.exists()  # never nothing to resume
        removed.append(Path(target).name)
        real_replace(source, target)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(os, "replace", replace_and_check)
        swap_in_directory(partial, last)
    assert removed == ["last.ckpt"] and (last / "step").read_text() == "8"
    assert not (checkpoints / "last.ckpt.old").exists()

    # A single-file last.ckpt (an earlier DDP run, now resumed under FSDP2) is replaced as well.
    shutil.rmtree(last)
    last.write_bytes(b"single file")
    partial.mkdir()
    (partial / "step").write_text("10")
    swap_in_directory(partial, last)
    assert (last / "step").read_text() == "10" and not (checkpoints / "last.ckpt.old").exists()


def test_a_single_file_checkpoint_replaces_a_sharded_one(tmp_path):
    from sapiens2_ft.training.checkpoint_io import AtomicCheckpointIO

    last = tmp_path / "checkpoints" / "last.ckpt"
    (last / "shards").mkdir(parents=True)  # from an earlier FSDP2 run, now continued without sharding
    AtomicCheckpointIO().save_checkpoint({"global_step": 5}, last)
    assert last.is_file() and torch.load(last, weights_only=True) == {"global_step": 5}
