"""A save that fails (full disk, quota, permission) stops the run with one clear error naming the path, the
checkpoint's size and the free space; the previous checkpoint stays whole, no partial file is left, and on
several ranks every rank stops with the same message."""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import subprocess

import pytest
import torch
from conftest import pose_run_args
import forked
import save_failure_fit

from sapiens2_ft.training.checkpoint_io import AtomicCheckpointIO, CheckpointSaveError
from sapiens2_ft.training.cli import main


def failing_write(code: int, after_bytes: int = 64):
    """An ``AtomicCheckpointIO._write`` whose file fails with ``code`` once ``after_bytes`` are written."""
    def write(checkpoint: dict, f) -> None:
        class Filling:
            written = 0

            def write(self, data) -> int:
                if self.written + len(data) > after_bytes:
                    f.write(bytes(data)[: after_bytes - self.written])  # what fitted
                    raise OSError(code, os.strerror(code))
                self.written += len(data)
                return f.write(data)

            def flush(self) -> None:
                f.flush()

        torch.save(checkpoint, Filling())
    return write


@pytest.mark.parametrize("code,hint", [(errno.ENOSPC, "larger file system"), (errno.EDQUOT, "quota"),
                                       (errno.EACCES, "permissions")])
def test_a_failed_write_names_path_size_and_free_space_and_keeps_the_previous(tmp_path, code, hint):
    io = AtomicCheckpointIO()
    path = tmp_path / "checkpoints" / "last.ckpt"
    io.save_checkpoint({"global_step": 2, "w": torch.zeros(10)}, path)
    io._write = failing_write(code)
    with pytest.raises(CheckpointSaveError) as caught:
        io.save_checkpoint({"global_step": 4, "w": torch.zeros(1000)}, path)
    message = str(caught.value)
    free = shutil.disk_usage(path.parent).free
    assert message.startswith(f"cannot write checkpoint {path}: {os.strerror(code)} ({errno.errorcode[code]})")
    assert "the checkpoint is 4.0 kB (4,000 bytes)" in message and f"free on {path.parent}" in message
    reported = int(re.search(r"\(([\d,]+) bytes\) free on", message).group(1).replace(",", ""))
    assert abs(reported - free) < 10**8  # other processes write to the same disk meanwhile
    assert hint in message
    assert torch.load(path, weights_only=True)["global_step"] == 2  # the previous one, whole
    assert [p.name for p in path.parent.iterdir()] == ["last.ckpt"]  # no temporary file left


@pytest.fixture
def small_filesystem(tmp_path):
    """A 1 MB tmpfs at ``tmp_path/small`` (mounting needs root; skipped where it is not allowed)."""
    mount_point = tmp_path / "small"
    mount_point.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount_point)], capture_output=True,
                          text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.strip() or done.returncode}); the patched-write "
                    "tests cover the same path")
    yield mount_point
    subprocess.run(["umount", str(mount_point)], check=True)


def test_a_full_file_system(small_filesystem):
    io = AtomicCheckpointIO()
    path = small_filesystem / "last.ckpt"
    io.save_checkpoint({"global_step": 2, "w": torch.zeros(50_000)}, path)  # 200 kB of 1 MB
    with pytest.raises(CheckpointSaveError, match=r"No space left on device \(ENOSPC\); the checkpoint is 1\.2 MB "
                                                  r"\(1,200,000 bytes\), [0-9.]+ kB .* free on "):
        io.save_checkpoint({"global_step": 4, "w": torch.zeros(300_000)}, path)
    assert torch.load(path, weights_only=True)["global_step"] == 2
    assert [p.name for p in small_filesystem.iterdir()] == ["last.ckpt"]


def test_a_run_whose_disk_fills_stops_with_the_message(tiny_coco, tiny_pose308_dir, tmp_path, monkeypatch):
    write = failing_write(errno.ENOSPC, after_bytes=10_000)
    real = AtomicCheckpointIO._write
    monkeypatch.setattr(AtomicCheckpointIO, "_write",
                        lambda self, ckpt, f: (write if ckpt["global_step"] >= 4 else real.__get__(self))(ckpt, f))
    run_dir = tmp_path / "run"
    with pytest.raises(SystemExit, match=f"cannot write checkpoint {run_dir / 'checkpoints'}/.*No space left on "
                                         "device .* free on .*the previous checkpoint is kept"):
        main(pose_run_args(tiny_coco, tiny_pose308_dir, run_dir, 4, "--tracking.logger", "csv", "--export", "false"))
    checkpoints = run_dir / "checkpoints"
    assert torch.load(checkpoints / "last.ckpt", weights_only=True)["global_step"] == 2
    assert sorted(p.name for p in checkpoints.iterdir()) == ["best-step2.ckpt", "last.ckpt"]


LAYOUTS = {"ddp": 0, "fsdp2": 1, "fsdp2_file": 0}  # the failing rank of each


@pytest.mark.distributed
def test_every_rank_stops_with_the_same_message(tmp_path):
    """2 gloo ranks (forked, tests/forked.py); rank-0-only single-file saves (DDP, FSDP2 consolidated) and FSDP2
    shards on every rank, one after the other in one launch."""
    layouts = ",".join(f"{name}:{rank}" for name, rank in LAYOUTS.items())
    with torch.random.fork_rng(devices=[]):
        save_failure_fit.write_init(tmp_path)
    argv = ["--out", str(tmp_path), "--layouts", layouts]
    try:
        forked.start_ranks(forked.as_rank, (2, forked.free_port(), save_failure_fit.main, (argv,), tmp_path / "logs"),
                           nprocs=2, timeout=300)
    except pytest.fail.Exception:  # a rank hangs in the failed save
        done = [name for name in LAYOUTS if (tmp_path / name / "rank1.json").exists()]
        pytest.fail(f"a rank hung after a failed save (layouts done: {done})\n"
                    f"{(tmp_path / 'logs' / 'rank1.log').read_text()[-3000:]}")
    for name, fail_rank in LAYOUTS.items():
        out = tmp_path / name
        reports = [json.loads((out / f"rank{rank}.json").read_text()) for rank in (0, 1)]
        assert reports[0]["error"] == reports[1]["error"], name
        assert reports[0]["error"].startswith(f"rank {fail_rank}: cannot write checkpoint {out / 'last.ckpt'}: "
                                              "No space left on device (ENOSPC); the checkpoint is 15."), name
        assert all(r["unchanged"] and r["left"] == [] for r in reports), (name, reports)
