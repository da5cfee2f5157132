"""Nothing of the user's is destroyed. ``export``: a folder holding files an export did not write is refused unless
``--overwrite``, which replaces only the export's files; an earlier export is replaced; ``--push_to_hub`` uploads
the export's files only. ``predict``: ``--out`` is not, and is not inside, ``--input``. ``train``: ``--run_dir`` is a
new or empty folder, or a run."""

from __future__ import annotations

import json

import pytest

from conftest import pose_run_args

from sapiens2_ft import export
from sapiens2_ft.predict.cli import main as predict
from sapiens2_ft.training.cli import main as train
from sapiens2_ft.training.export_dir import MANIFEST_FILE, export_files


def test_a_folder_with_the_user_s_files_is_refused_then_kept_with_overwrite(seg_checkpoint, tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "config.json").write_text('{"mine": true}')
    (out / "notes.txt").write_text("my notes")
    (out / "model-00001-of-00002.safetensors").write_text("my weights")
    with pytest.raises(SystemExit, match=r"holds files an export did not write \(config\.json, "
                                         r"model-00001-of-00002\.safetensors, notes\.txt\).*--overwrite"):
        export.main(["--checkpoint", str(seg_checkpoint), "--out", str(out)])
    assert (out / "config.json").read_text() == '{"mine": true}' and len(list(out.iterdir())) == 3

    export.main(["--checkpoint", str(seg_checkpoint), "--out", str(out), "--overwrite"])
    assert (out / "notes.txt").read_text() == "my notes"
    assert json.loads((out / "config.json").read_text())["architectures"] == ["Sapiens2ForSemanticSegmentation"]
    files = json.loads((out / MANIFEST_FILE).read_text())["files"]
    assert "notes.txt" not in files and {"config.json", "model.safetensors", "preprocessor_config.json"} <= set(files)


def test_an_earlier_export_is_replaced_and_only_the_export_is_uploaded(seg_checkpoint, tmp_path, monkeypatch):
    out = tmp_path / "export"
    export.main(["--checkpoint", str(seg_checkpoint), "--out", str(out)])
    first = json.loads((out / MANIFEST_FILE).read_text())["files"]
    export.main(["--checkpoint", str(seg_checkpoint), "--out", str(out)])  # its own earlier export: no flag needed
    assert json.loads((out / MANIFEST_FILE).read_text())["files"] == first
    (out / "private.txt").write_text("not for the hub")
    assert set(export_files(out)) == set(first) and "private.txt" not in first  # what a push sends (test_hub.py)


def test_predict_refuses_an_out_folder_in_its_input(tmp_path):
    photos = tmp_path / "photos"
    photos.mkdir()
    (photos / "photo.png").write_bytes(b"my photo")
    for out in (photos, photos / "predictions"):
        with pytest.raises(SystemExit, match="give a folder outside --input"):
            predict(["--model", "any", "--input", str(photos), "--out", str(out)])
    with pytest.raises(SystemExit, match="is --input"):
        predict(["--model", "any", "--input", str(photos / "photo.png"), "--out", str(photos / "photo.png")])
    assert sorted(p.name for p in photos.iterdir()) == ["photo.png"] and (photos / "photo.png").read_bytes() == b"my photo"


def test_train_refuses_a_run_dir_that_is_not_a_run(tiny_coco, tiny_pose308_dir, tmp_path):
    folder = tmp_path / "results"
    folder.mkdir()
    (folder / "metrics.csv").write_text("mine\n")
    (folder / "config.yaml").write_text("mine: true\n")
    with pytest.raises(SystemExit, match=r"results is not a run directory: it holds other files \(config\.yaml, "
                                         r"metrics\.csv\)"):
        train(pose_run_args(tiny_coco, tiny_pose308_dir, folder, 1))
    assert sorted(p.name for p in folder.iterdir()) == ["config.yaml", "metrics.csv"]
    assert (folder / "metrics.csv").read_text() == "mine\n"
