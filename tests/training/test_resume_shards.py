"""Training from shards written by ``python -m sapiens2_ft.write_shards``: a run stopped inside an epoch and resumed
trains every later step on the same samples with the same loss, and ends with the same weights, bit for bit
(as ``test_resume_workers.py`` checks for files)."""

from __future__ import annotations

import pytest
from test_resume_workers import assert_same_run, run_args, stop_and_resume, uninterrupted_run

from sapiens2_ft.write_shards import main as write_shards


def test_write_shards_cuts_shards_by_size_and_by_count(tiny_coco, tmp_path):
    """``--shard_mb`` and ``--shard_samples`` each close a shard: a shard is closed once it holds that many MiB or
    samples, so the 6 images (4 train, 2 val, each more than 0.03 MiB) go into 6 shards with ``--shard_mb 0.03``,
    into 3 with ``--shard_samples 2``, into 1 by default (1024 MiB, 10,000 samples)."""
    assert sorted(p.stat().st_size > 0.03 * 2**20 for p in tiny_coco.rglob("*.jpg")) == [True] * 6
    counts = {}
    for name, argv in (("size", ["--shard_mb", "0.03"]), ("count", ["--shard_samples", "2"]), ("default", [])):
        out = tmp_path / name
        assert write_shards(["--config", "pose_coco.yaml", "--data.root", str(tiny_coco), "--out", str(out),
                             *argv]) == 0
        counts[name] = len(list(out.glob("shard-*.tar")))
    assert counts == {"size": 6, "count": 3, "default": 1}


@pytest.mark.slow
def test_a_run_from_shards_resumes_bit_exact(tiny_coco, tiny_pose308_dir, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("SAPIENS2_FT_ALLOW_CLASSES", "faults.")
    shards = tmp_path / "shards"
    assert write_shards(["--config", "pose_coco.yaml", "--data.root", str(tiny_coco), "--out", str(shards),
                         "--shard_samples", "2"]) == 0
    assert f"train from them: add --data.shards {shards}" in capsys.readouterr().out

    def args(run_dir, callbacks):  # the dataset folder is gone: everything comes from the shards
        return run_args(tmp_path / "nowhere", tiny_pose308_dir, run_dir, callbacks, 2, True,
                        "--data.shards", str(shards))

    expected = uninterrupted_run(tmp_path / "uninterrupted", args)
    assert len(expected[0]) == 10
    first_epoch = [r["ids"] for r in expected[0][:4]]  # shard by shard: 2 images of 2 people a shard
    assert all({i // 4 for i in ids} == {ids[0] // 4} for ids in first_epoch)
    assert_same_run(expected, stop_and_resume(tmp_path / "resumed", args, 6), 6)
