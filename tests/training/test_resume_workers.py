"""Resume with DataLoader workers: a run stopped after a checkpoint and resumed trains every later step on the same
samples with the same loss as an uninterrupted run, and ends with the same weights and optimiser state, bit for bit
(CPU, one process), for ``num_workers`` 0 and 2, persistent workers on and off, and resume points inside an epoch
and at an epoch's end, from validation and from ``checkpoint_every_n_steps`` checkpoints."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml
from conftest import pose_run_args
from faults import TrainingCrash

from datamodules import loaders
from sapiens2_ft.training.cli import main

STEPS = 10  # 8 people at batch 2: 4 batches an epoch, so epochs end at steps 4 and 8
VALIDATE_EVERY = 3  # validations (and their checkpoints) at steps 3, 6, 9; a StepCheckpoint at every other step


def run_args(coco, model, run_dir: Path, callbacks: list[dict], workers: int, persistent: bool, *extra,
             trainer: dict | None = None) -> list[str]:
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    config = run_dir.parent / f"{run_dir.name}-trainer.yaml"
    config.write_text(yaml.safe_dump({"trainer": {"callbacks": callbacks, **(trainer or {})}}))
    return pose_run_args(coco, model, run_dir, STEPS, "--tracking.logger", "csv", "--export", "false",
                         "--trainer.val_check_interval", str(VALIDATE_EVERY), "--checkpoint_every_n_steps", "1",
                         "--data.num_workers", str(workers), "--data.persistent_workers", str(persistent).lower(),
                         "--config", str(config), *extra)


def record(path: Path) -> dict:
    return {"class_path": "faults.RecordBatches", "init_args": {"path": str(path)}}


def uninterrupted_run(out: Path, args) -> tuple[list[dict], dict]:
    """(per-step records, last checkpoint) of a run never stopped; ``args(run_dir, callbacks)``."""
    main(args(out / "run", [record(out / "steps.jsonl")]))
    return steps_of(out / "steps.jsonl"), torch.load(out / "run" / "checkpoints" / "last.ckpt", weights_only=True)


def steps_of(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def stop_and_resume(out: Path, args, last_good: int) -> tuple[list[dict], dict]:
    """Crash the run at step ``last_good + 1`` (before its checkpoint), resume it with ``--resume auto``:
    (per-step records of the resumed run, its last checkpoint)."""
    crash = {"class_path": "faults.CrashAtStep", "init_args": {"step": last_good + 1}}
    with pytest.raises(TrainingCrash):
        main(args(out / "run", [crash]))
    checkpoint = out / "run" / "checkpoints" / "last.ckpt"
    assert torch.load(checkpoint, weights_only=True)["global_step"] == last_good
    main(args(out / "run", [record(out / "resumed.jsonl")]) + ["--resume", "auto"])
    return steps_of(out / "resumed.jsonl"), torch.load(checkpoint, weights_only=True)


def assert_same_run(expected: tuple[list[dict], dict], resumed: tuple[list[dict], dict], last_good: int) -> None:
    """Step by step from the resume point (the first step that differs is the one reported), then the final state."""
    (expected_steps, expected_state), (resumed_steps, state) = expected, resumed
    assert [r["step"] for r in resumed_steps] == list(range(last_good + 1, len(expected_steps) + 1))
    for got in resumed_steps:
        want = expected_steps[got["step"] - 1]
        assert got == want, f"step {got['step']}: resumed run {got}, uninterrupted run {want}"
    assert state["global_step"] == expected_state["global_step"] == len(expected_steps)
    for key, value in expected_state["state_dict"].items():
        assert torch.equal(value, state["state_dict"][key]), key
    for a, b in zip(expected_state["optimizer_states"][0]["state"].values(),
                    state["optimizer_states"][0]["state"].values()):
        assert all(torch.equal(a[name], b[name]) for name in a)


class Indices(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 20

    def __getitem__(self, key) -> int:
        return key[0]


@pytest.mark.parametrize("workers", [0, 2])
def test_a_training_loader_starts_at_its_position_on_every_rank(monkeypatch, workers):
    """Each of 2 processes, resumed at batch 2 of epoch 3, yields the rest of its own share of that epoch."""
    def make(start=None):
        return loaders.make_loader(Indices(), 2, True, workers, False, True, seed=7, start=start)

    for rank in range(2):
        monkeypatch.setattr(loaders, "_process", lambda: (rank, 2))
        whole = make()
        whole.sampler.set_epoch(3)
        expected = [batch.tolist() for batch in whole]
        assert len(expected) == 5 and sum(expected, []) == [i for i, _ in whole.sampler][:10]
        resumed = make(loaders.TrainPosition(epoch=3, batches=2))
        assert [batch.tolist() for batch in resumed] == expected[2:]
        resumed.sampler.set_epoch(4)  # the next epoch (Lightning sets it) is whole again
        whole.sampler.set_epoch(4)
        assert [batch.tolist() for batch in resumed] == [batch.tolist() for batch in whole]


@pytest.fixture
def allow_faults(monkeypatch):
    monkeypatch.setenv("SAPIENS2_FT_ALLOW_CLASSES", "faults.")


@pytest.fixture(scope="module")
def uninterrupted(tiny_coco, tiny_pose308_dir, tmp_path_factory) -> tuple[list[dict], dict]:
    """The reference run, without workers."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SAPIENS2_FT_ALLOW_CLASSES", "faults.")
        return uninterrupted_run(tmp_path_factory.mktemp("uninterrupted"),
                                 lambda run_dir, callbacks: run_args(tiny_coco, tiny_pose308_dir, run_dir, callbacks,
                                                                     0, True))


@pytest.mark.parametrize("workers,persistent,last_good", [
    (2, True, 6),  # a validation checkpoint inside epoch 1 (2 of its 4 batches trained)
    (2, False, 4),  # a StepCheckpoint at the end of epoch 0: resumes at epoch 1, batch 0
    (2, True, 8),  # a StepCheckpoint at the end of epoch 1
    (2, False, 3),  # a validation checkpoint inside epoch 0
    (0, True, 5),  # no workers: a StepCheckpoint inside epoch 1
])
@pytest.mark.slow
def test_resumed_run_trains_the_same_batches(uninterrupted, tiny_coco, tiny_pose308_dir, tmp_path, allow_faults,
                                             workers, persistent, last_good, recwarn):
    resumed = stop_and_resume(tmp_path, lambda run_dir, callbacks: run_args(
        tiny_coco, tiny_pose308_dir, run_dir, callbacks, workers, persistent), last_good)
    assert_same_run(uninterrupted, resumed, last_good)
    # Lightning's "your dataloader is not resumable" would be wrong here: the batches above are the same.
    assert not [w for w in recwarn if "ended before the epoch ended" in str(w.message)]


@pytest.mark.slow
def test_resume_when_the_checkpoint_is_restored_after_setup(tiny_coco, tiny_pose308_dir, tmp_path, allow_faults):
    """Under FSDP2 the checkpoint is restored after the strategy's setup, where an epoch-based lr schedule has already
    built and iterated the train loader (its workers drew epoch 0's first indices): it is built again."""
    def args(run_dir, callbacks):
        return run_args(tiny_coco, tiny_pose308_dir, run_dir, callbacks, 2, True, "--trainer.max_steps", "-1",
                        "--trainer.max_epochs", "3", trainer={"strategy": {"class_path": "faults.RestoreAfterSetup"}})

    expected = uninterrupted_run(tmp_path / "uninterrupted", args)
    assert len(expected[0]) == 12
    assert_same_run(expected, stop_and_resume(tmp_path / "resumed", args, 6), 6)


@pytest.mark.parametrize("entry", [{"epoch": 1}, {"epoch": -1, "batches": 0}, {"epoch": "x", "batches": 2}, None])
def test_a_malformed_position_entry_is_named(entry):
    from sapiens2_ft.models.checkpoints import CheckpointError
    from sapiens2_ft.training.callbacks.resume_position import read_position

    with pytest.raises(CheckpointError, match="train_data_position"):
        read_position(entry)
    assert read_position({"epoch": 2, "batches": 3}) == loaders.TrainPosition(2, 3)


@pytest.mark.slow
def test_resume_of_a_data_train_mix(tiny_coco, tiny_pose308_dir, tmp_path, allow_faults):
    """Two datasets drawn 1.5 and 0.5 times an epoch (16 positions, 8 batches): resumed inside epoch 0."""
    ann = "annotations/person_keypoints_train2017.json"
    mix = json.dumps([{"root": str(tiny_coco), "ann": ann, "images": "train2017", "repeat": 1.5},
                      {"root": str(tiny_coco), "ann": ann, "images": "train2017", "repeat": 0.5, "name": "again"}])

    def args(run_dir, callbacks):
        return run_args(tiny_coco, tiny_pose308_dir, run_dir, callbacks, 2, True, "--data.train", mix)

    expected = uninterrupted_run(tmp_path / "uninterrupted", args)
    assert_same_run(expected, stop_and_resume(tmp_path / "resumed", args, 5), 5)
