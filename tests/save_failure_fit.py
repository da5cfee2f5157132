"""Two CPU ranks (gloo) save a checkpoint, then save it again while one rank's disk is full; one launch runs
every layout in turn (the ranks' start-up is most of the cost).

``python tests/save_failure_fit.py --out DIR --layouts ddp:0,fsdp2:1,fsdp2_file:0`` (layout:failing rank)
writes ``DIR/LAYOUT/rank{r}.json`` per rank: the error that rank raised on the second save (or null), whether
the checkpoint on disk is unchanged and the partial / temporary files left beside it. Under ``ddp`` and
``fsdp2_file`` rank 0 writes one file; under ``fsdp2`` every rank writes its shards. The later trainers of both
ranks use the first one's process group. The test forks both ranks (tests/forked.py); run as a script, Lightning
launches rank 1.
"""

from __future__ import annotations

import argparse
import errno
import hashlib
import json
import os
import shutil
from pathlib import Path

import lightning as L
import torch
import torch.distributed as dist
import torch.distributed.checkpoint.filesystem as dcp_filesystem
from distributed_fit import CLASSES, SIZE, FixedBatches

from sapiens2_ft.tasks.registry import build_task_model
from sapiens2_ft.tasks.seg.module import SegmentationModule
from sapiens2_ft.training.checkpoint_io import AtomicCheckpointIO, CheckpointSaveError, agree_on_failed_saves
from sapiens2_ft.training.strategies import FSDP2Strategy


def fill_disk(trainer: L.Trainer) -> None:
    """From now on this process's checkpoint writes fail with ENOSPC after their first bytes."""
    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    io = trainer.strategy.checkpoint_io

    def write_some(checkpoint: dict, f) -> None:
        f.write(b"PK\x03\x04 some bytes before the disk filled up")
        full()

    io._write = write_some
    dcp_filesystem.FileSystem.create_stream = full  # the shard files of a distributed checkpoint


def digest(path: Path) -> str:
    """A hash of a checkpoint file, or of every file of a checkpoint directory."""
    files = sorted(path.rglob("*")) if path.is_dir() else [path]
    h = hashlib.sha256()
    for f in files:
        if f.is_file():
            h.update(f.name.encode() + f.read_bytes())
    return h.hexdigest()


def write_init(out: Path) -> Path:
    """The model every layout starts from, ``OUT/init`` (written once, before any rank starts)."""
    init = out / "init"
    if not init.exists():
        torch.manual_seed(0)
        build_task_model("seg", CLASSES, SIZE, size="tiny")[0].save_pretrained(init)
    return init


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--layouts", default="ddp:0,fsdp2:1,fsdp2_file:0")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    out = Path(args.out)
    init = write_init(out)  # already written by the test that forks the ranks
    for layout in args.layouts.split(","):
        name, fail_rank = layout.split(":")
        save_twice(init, out / name, name, int(fail_rank))
    dist.destroy_process_group()


def save_twice(init: Path, out: Path, layout: str, fail_rank: int) -> None:
    module = SegmentationModule(pretrained=str(init), input_size=SIZE, class_names=CLASSES, dice_weight=0.0,
                                optim={"lr": 1e-3, "warmup_steps": 0, "fused": False})
    strategy = {"ddp": "ddp", "fsdp2": FSDP2Strategy(),
                "fsdp2_file": FSDP2Strategy(save_distributed_checkpoint=False)}[layout]
    trainer = L.Trainer(accelerator="cpu", devices=2, strategy=strategy, max_steps=1, limit_val_batches=0,
                        logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, plugins=[AtomicCheckpointIO()], use_distributed_sampler=False)
    agree_on_failed_saves(trainer.strategy)
    # Each rank sees its own free space (ranks on several machines do; so do ranks while other jobs write to the
    # disk): the message still has to be the same on every rank.
    real_usage = shutil.disk_usage
    shutil.disk_usage = lambda p: real_usage(p)._replace(free=real_usage(p).free + trainer.global_rank * 2**30)
    create_stream = dcp_filesystem.FileSystem.create_stream
    try:
        trainer.fit(module, datamodule=FixedBatches())
        out.mkdir(parents=True, exist_ok=True)
        checkpoint = out / "last.ckpt"
        trainer.save_checkpoint(checkpoint)  # step 1, whole
        before = digest(checkpoint)
        if trainer.global_rank == fail_rank:
            fill_disk(trainer)
        error = None
        try:
            trainer.save_checkpoint(checkpoint)
        except CheckpointSaveError as err:
            error = str(err)
        dist.barrier()  # every rank reached here: none hangs in the failed save
        left = sorted(p.name for p in out.iterdir() if p.name.startswith(".") or p.name.endswith((".partial", ".old")))
        (out / f"rank{trainer.global_rank}.json").write_text(json.dumps(
            {"error": error, "unchanged": digest(checkpoint) == before, "left": left}))
        dist.barrier()
    finally:
        shutil.disk_usage, dcp_filesystem.FileSystem.create_stream = real_usage, create_stream


if __name__ == "__main__":
    main()
