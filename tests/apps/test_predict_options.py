"""Fast-prediction options: decoding in background threads, bf16 autocast and torch.compile leave the results
as they are (bf16: every task still writes finite results)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from sapiens2_ft import predict
from sapiens2_ft.predict.inputs import background


def results(out) -> list:
    return sorted((r["image_id"], r["bbox"], r["keypoints"]) for r in json.loads((out / "keypoints.json").read_text()))


def test_background_decoding_gives_the_same_results(pose_run, tiny_coco, tmp_path):
    args = ["--model", str(pose_run[0] / "export"), "--input", str(tiny_coco / "train2017"), "--batch_size", "1",
            "--boxes", str(tiny_coco / "annotations" / "person_keypoints_train2017.json")]
    inline = predict.main([*args, "--out", str(tmp_path / "inline"), "--workers", "0"])
    threads = predict.main([*args, "--out", str(tmp_path / "threads"), "--workers", "2"])
    assert results(inline) == results(threads) and len(results(inline)) == 8


def test_background_keeps_order_and_raises_the_producers_error():
    assert list(background(iter(range(50)), depth=3)) == list(range(50))

    def failing():
        yield 1
        raise OSError("disk gone")

    items = background(failing())
    assert next(items) == 1
    with pytest.raises(OSError, match="disk gone"):
        next(items)


def test_bf16_autocast_runs_every_task(pose_run, seg_checkpoint, dense_root, tmp_path):
    out = predict.main(["--model", str(pose_run[0] / "export"), "--model", str(seg_checkpoint),
                        "--input", str(dense_root / "val" / "images"), "--out", str(tmp_path / "out"),
                        "--precision", "bf16", "--whole_image"])
    people = json.loads((out / "pose" / "keypoints.json").read_text())
    assert len(people) == 2 and np.isfinite([p["keypoints"] for p in people]).all()
    assert len(list((out / "seg").glob("*_overlay.png"))) == 2 and len(list((out / "sheets").glob("*.jpg"))) == 2


def test_compiled_model_gives_the_eager_results(pose_run, tiny_coco, tmp_path):
    """``aot_eager``: dynamo's graphs without inductor's code generation (which the slow
    tests/models/test_compile.py runs)."""
    args = ["--model", str(pose_run[0] / "export"), "--input", str(tiny_coco / "val2017"),
            "--boxes", str(tiny_coco / "annotations" / "person_keypoints_val2017.json")]
    eager = results(predict.main([*args, "--out", str(tmp_path / "eager")]))
    compiled = results(predict.main([*args, "--out", str(tmp_path / "compiled"), "--compile",
                                          "--compile_backend", "aot_eager"]))
    assert [r[:2] for r in compiled] == [r[:2] for r in eager]
    assert np.allclose([r[2] for r in compiled], [r[2] for r in eager], atol=0.05)
