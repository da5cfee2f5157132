"""Training from shards written by ``python -m sapiens2_ft.write_shards``: a run stopped inside an epoch and resumed
trains every later step on the same samples with the same loss, and ends with the same weights, bit for bit
(as ``test_resume_workers.py`` checks for files)."""

from __future__ import annotations

import pytest
from test_resume_workers import assert_same_run, run_args, stop_and_resume, uninterrupted_run

from sapiens2_ft.write_shards import main as write_shards


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
