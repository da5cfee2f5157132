"""``--resume auto`` and ``--resume RUN_DIR`` skip an unreadable or incomplete newest checkpoint (truncated,
zeroed, a distributed checkpoint missing a shard), say which and why, and continue from the newest readable one;
a checkpoint given by path that is unreadable stays an error."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp
from conftest import pose_run_args

from datamodules.errors import BadInput, Refused
from sapiens2_ft.training.cli import main
from sapiens2_ft.training.run_dir import checkpoint_candidates, resolve_resume, unreadable_reason

STEPS = 4  # validations (and checkpoints) at steps 2 and 4


@pytest.fixture(scope="module")
def finished(tiny_coco, tiny_pose308_dir, tmp_path_factory) -> Path:
    """A 4-step run with ``last.ckpt`` (step 4) and ``best-step{2,4}.ckpt``; an extra step checkpoint at step 3."""
    run_dir = tmp_path_factory.mktemp("finished") / "run"
    main(pose_run_args(tiny_coco, tiny_pose308_dir, run_dir, STEPS, "--tracking.logger", "csv", "--export", "false"))
    checkpoints = run_dir / "checkpoints"
    step3 = torch.load(checkpoints / "last.ckpt", weights_only=True)
    step3["global_step"] = 3
    torch.save(step3, checkpoints / "step-step3.ckpt")  # as a ModelCheckpoint(every_n_train_steps) would name it
    return run_dir


def copy_run(finished: Path, tmp_path: Path) -> Path:
    run_dir = tmp_path / "run"
    shutil.copytree(finished, run_dir)
    return run_dir


def truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def zero(path: Path) -> None:
    path.write_bytes(bytes(path.stat().st_size))  # the size survived a crash, the data did not


def to_distributed(checkpoint: Path, directory: Path) -> None:
    """The layout FSDP2 writes: tensors as shards (``.metadata`` + ``*.distcp``), the rest in ``meta.pt``."""
    state = torch.load(checkpoint, weights_only=True)
    dcp.save({"state_dict": state.pop("state_dict")}, checkpoint_id=str(directory), no_dist=True)
    state.pop("optimizer_states", None)
    torch.save(state, directory / "meta.pt")


def test_the_order_checkpoints_are_tried_in(finished):
    names = [p.name for p in checkpoint_candidates(finished)]
    best = sorted((n for n in names if n.startswith("best")), reverse=True)
    assert names == ["last.ckpt", *best, "step-step3.ckpt"] and best[-1] == "best-step2.ckpt"


@pytest.mark.parametrize("damage,reason", [(truncate, "cannot read checkpoint"),
                                           (zero, "is not a checkpoint file: it starts with zeros")])
def test_an_unreadable_last_falls_back_to_the_newest_readable(finished, tmp_path, capsys, damage, reason):
    run_dir = copy_run(finished, tmp_path)
    checkpoints = run_dir / "checkpoints"
    damage(checkpoints / "last.ckpt")
    newest_best = checkpoint_candidates(run_dir)[1]
    for resume in ("auto", str(run_dir)):
        assert resolve_resume(resume, str(run_dir) if resume == "auto" else None, "pose_coco") == (newest_best,
                                                                                                   run_dir)
        out = capsys.readouterr().out
        assert f"--resume: skipping {checkpoints / 'last.ckpt'}, unreadable or incomplete: " in out and reason in out
        assert f"continuing from {newest_best}, the newest readable checkpoint" in out

    for best in checkpoints.glob("best-*.ckpt"):  # then the step checkpoints
        damage(best)
    assert resolve_resume(str(run_dir), None, "pose_coco") == (checkpoints / "step-step3.ckpt", run_dir)

    damage(checkpoints / "step-step3.ckpt")
    with pytest.raises(BadInput, match=r"no readable checkpoint in .*\n  .*last.ckpt: .*" + reason):
        resolve_resume("auto", str(run_dir), "pose_coco")


def test_a_checkpoint_given_by_path_must_be_readable(finished, tmp_path):
    run_dir = copy_run(finished, tmp_path)
    last = run_dir / "checkpoints" / "last.ckpt"
    truncate(last)
    with pytest.raises(BadInput, match=f"--resume: {last} is unreadable or incomplete: cannot read checkpoint"):
        resolve_resume(str(last), None, "pose_coco")


def test_a_distributed_checkpoint_missing_a_shard_is_skipped(finished, tmp_path, capsys):
    run_dir = copy_run(finished, tmp_path)
    last = run_dir / "checkpoints" / "last.ckpt"
    saved = run_dir / "saved.ckpt"
    last.rename(saved)
    to_distributed(saved, last)
    assert unreadable_reason(last) is None  # whole, it resumes
    assert resolve_resume("auto", str(run_dir), "pose_coco") == (last, run_dir)

    (shard,) = last.glob("*.distcp")
    shard.write_bytes(shard.read_bytes()[:100])
    assert unreadable_reason(last).startswith(f"shard {shard.name} is 100 bytes, its .metadata needs ")
    shard.unlink()
    assert unreadable_reason(last) == f"shard {shard.name} is missing (listed in its .metadata)"
    assert resolve_resume("auto", str(run_dir), "pose_coco")[0] == checkpoint_candidates(run_dir)[1]
    assert f"skipping {last}, unreadable or incomplete: shard {shard.name} is missing" in capsys.readouterr().out
    with pytest.raises(BadInput, match="is unreadable or incomplete: shard .* is missing"):
        resolve_resume(str(last), None, "pose_coco")


@pytest.mark.slow  # a training run: the fast tier keeps this file's unit tests
def test_a_run_with_a_zeroed_last_checkpoint_continues(finished, tiny_coco, tiny_pose308_dir, tmp_path, capsys):
    run_dir = copy_run(finished, tmp_path)
    zero(run_dir / "checkpoints" / "last.ckpt")
    resumed_from = checkpoint_candidates(run_dir)[1]
    summary = main(pose_run_args(tiny_coco, tiny_pose308_dir, run_dir, STEPS + 2, "--tracking.logger", "csv",
                                 "--export", "false", "--resume", str(run_dir)))
    out = capsys.readouterr().out
    assert f"resuming {resumed_from}: task pose, 17 outputs, step {torch.load(resumed_from, weights_only=True)['global_step']}" in out
    assert summary["global_step"] == STEPS + 2
    assert torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == STEPS + 2


def test_auto_under_a_job_takes_the_job_s_own_run(finished, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for name in ("4242", "later"):  # "later", changed last, is what auto takes outside the job
        (tmp_path / "runs" / "pose_coco" / name / "checkpoints").mkdir(parents=True)
        shutil.copy(finished / "checkpoints" / "last.ckpt", tmp_path / "runs" / "pose_coco" / name / "checkpoints")
    for name in ("SLURM_JOB_ID", "TORCHELASTIC_RUN_ID", "SAPIENS2_FT_RUN_DIR"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(Refused, match="runs/pose_coco/later .not finished."):  # outside a job: named, not taken
        resolve_resume("auto", None, "pose_coco")
    monkeypatch.setenv("SLURM_JOB_ID", "4242")  # the requeued job
    assert resolve_resume("auto", None, "pose_coco")[1] == Path("runs/pose_coco/4242")
    monkeypatch.setenv("SLURM_JOB_ID", "4343")  # a new job without a run of its own: the latest run, as before
    assert resolve_resume("auto", None, "pose_coco")[1] == Path("runs/pose_coco/later")
