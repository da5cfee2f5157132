"""Issue 58 through the public commands: what a recipe, a handed export, a keypoint set or a decompression bomb
from someone else does to train, export, evaluate, predict, check_data, the Space writer and a Hub push. Each
case names the rule of ``datamodules/boundary`` that holds it (the rules alone: ``tests/data/test_boundary.py``)."""

from __future__ import annotations

import getpass
import json
import shutil
import socket
from pathlib import Path

import cv2
import numpy as np
import pytest
import yaml
from bombs import BOMBS, write_bombs
from conftest import pose_run_args, write_coco
from fake_hub import FakeHub

from datamodules.errors import RefusedInput
from sapiens2_ft import export, predict
from sapiens2_ft.training.cli import main as train


@pytest.fixture
def home(tmp_path) -> Path:
    """Stand-ins for the user's own files that a hostile folder aims at."""
    home = tmp_path / "home"
    (home / ".cache" / "huggingface").mkdir(parents=True)
    (home / ".cache" / "huggingface" / "token").write_text("hf_the_users_real_token_0123456789")
    (home / "notes.txt").write_text("the user's notes")
    (home / ".bashrc").write_text("the user's shell setup")
    return home


def unchanged(home: Path) -> bool:
    return ((home / "notes.txt").read_text(), (home / ".bashrc").read_text()) == ("the user's notes",
                                                                                   "the user's shell setup")


# ---------------------------------------------------------------------------------------------------- case 1


@pytest.mark.parametrize("where", ["recipe", "command line"])
def test_a_recipe_whose_shard_url_is_a_command_runs_nothing(tiny_coco, tiny_pose308_dir, tmp_path, where):
    flag = tmp_path / "PWNED"
    url = f"pipe:touch {flag}; cat {{}}"
    args = pose_run_args(tiny_coco, tiny_pose308_dir, tmp_path / "run", 1)
    if where == "recipe":
        recipe = tmp_path / "handed.yaml"
        recipe.write_text(yaml.safe_dump({"data": {"shards": url}}))
        args += ["--config", str(recipe)]
    else:
        args += ["--data.shards", url]
    with pytest.raises(SystemExit, match=r"data\.shards: pipe:touch .* the scheme 'pipe:' is not read \(pipe: would "
                                         r"run a shell command\); remote data is https://, http://, s3://, gs://"):
        train(args)
    assert not flag.exists()


# ---------------------------------------------------------------------------------------------------- case 2


@pytest.fixture
def handed_export(pose_run, tmp_path) -> Path:
    """A copy of a pose export, as someone would hand it over."""
    return shutil.copytree(pose_run[1]["export"], tmp_path / "handed")


def test_export_onnx_replaces_links_named_like_its_outputs_and_never_writes_through_them(handed_export, home):
    (handed_export / "model.onnx").symlink_to(home / "notes.txt")
    (handed_export / "onnx_config.json").symlink_to(home / ".bashrc")
    out = export.main(["--checkpoint", str(handed_export), "--format", "onnx"])
    assert unchanged(home)
    assert not (out / "model.onnx").is_symlink() and (out / "model.onnx").stat().st_size > 100_000
    assert json.loads((out / "onnx_config.json").read_text())["task"] == "pose"


def test_export_onnx_refuses_a_link_among_the_files_it_reads(handed_export, home):
    (handed_export / "preprocessor_config.json").unlink()
    (handed_export / "preprocessor_config.json").symlink_to(home / ".bashrc")  # would be read into onnx_config.json
    with pytest.raises(SystemExit, match=r"preprocessor_config\.json is a symbolic link \(to .*\.bashrc\); links in "
                                         "an export folder are not followed"):
        export.main(["--checkpoint", str(handed_export), "--format", "onnx"])
    assert unchanged(home) and not (handed_export / "model.onnx").exists()


def test_evaluate_leaves_a_card_that_is_a_link_alone(handed_export, tiny_coco, home, tmp_path, capsys):
    from sapiens2_ft import evaluate

    (handed_export / "README.md").unlink()
    (handed_export / "README.md").symlink_to(home / ".bashrc")
    evaluate.main(["--config", "pose_coco.yaml", "--data.root", str(tiny_coco), "--data.batch_size", "2",
                   "--data.num_workers", "0", "--model", str(handed_export), "--out", str(tmp_path / "eval")])
    assert "the model card was not updated" in capsys.readouterr().err and unchanged(home)
    assert (tmp_path / "eval" / "metrics.json").is_file()


# ---------------------------------------------------------------------------------------------------- case 3


@pytest.mark.parametrize("how", ["recorded", "named like a shard"])
def test_a_linked_secret_is_neither_copied_into_a_space_nor_uploaded(handed_export, home, tmp_path, monkeypatch, how):
    from sapiens2_ft.app.space import write_space

    token = home / ".cache" / "huggingface" / "token"
    if how == "recorded":  # the manifest lists it: the export's own files as far as the folder says
        (handed_export / "model.safetensors").rename(tmp_path / "weights")
        (handed_export / "model.safetensors").symlink_to(token)
    else:  # no manifest: the files named as an export names them
        (handed_export / "export_manifest.json").unlink()
        (handed_export / "model-00002-of-00002.safetensors").symlink_to(token)
    with pytest.raises(RefusedInput, match=r"\.safetensors is a symbolic link \(to .*token\)"):
        write_space(tmp_path / "space", [str(handed_export)], ["--model", str(handed_export)])
    assert not (tmp_path / "space").exists()
    hub = FakeHub(monkeypatch)
    with pytest.raises(SystemExit, match=r"--push_to_hub: .*\.safetensors is a symbolic link"):
        export.main(["--checkpoint", str(handed_export), "--push_to_hub", "someone/model"])
    assert hub.commits == []


# ---------------------------------------------------------------------------------------------------- case 8


def test_a_handed_export_s_keypoint_set_cannot_read_outside_its_folder(handed_export, tmp_path):
    secret = tmp_path / "secret.yaml"
    secret.write_text("name: secret\nkeypoints: [a]\nsigmas: [0.1]\n")
    (handed_export / "keypoints.yaml").write_text("name: mine\nextends: ../secret.yaml\nkeypoints: [b]\n"
                                                  "sigmas: [0.1]\n")
    image = tmp_path / "photos" / "a.png"
    image.parent.mkdir()
    cv2.imwrite(str(image), np.zeros((64, 48, 3), np.uint8))
    with pytest.raises(SystemExit, match=r"keypoints\.yaml: field 'extends': '\.\./secret\.yaml' is not inside the "
                                         "folder of"):
        predict.main(["--model", str(handed_export), "--input", str(image.parent), "--out", str(tmp_path / "out"),
                      "--whole_image", "--device", "cpu"])


def test_a_keypoint_set_that_extends_itself_is_a_message(tiny_coco, tiny_pose308_dir, tmp_path):
    (tmp_path / "a.yaml").write_text("name: a\nextends: b.yaml\nkeypoints: [x1]\nsigmas: [0.1]\n")
    (tmp_path / "b.yaml").write_text("name: b\nextends: a.yaml\nkeypoints: [x2]\nsigmas: [0.1]\n")
    with pytest.raises(SystemExit, match=r"'a\.yaml' leads back to itself: .*a\.yaml -> .*b\.yaml -> .*a\.yaml"):
        train(pose_run_args(tiny_coco, tiny_pose308_dir, tmp_path / "run", 1, "--data.keypoints",
                            str(tmp_path / "a.yaml")))


# ---------------------------------------------------------------------------------------------------- case 9


def test_the_pushed_card_names_nothing_of_the_machine(handed_export, tmp_path, monkeypatch):
    from sapiens2_ft.training.model_card import COMMAND, CARD_FILE

    monkeypatch.setattr(getpass, "getuser", lambda: "alice")
    monkeypatch.setattr(socket, "gethostname", lambda: "alice-workstation.lab.example.com")
    card = (handed_export / CARD_FILE).read_text()
    private = ("python train.py --config /home/alice/recipes/pose.yaml --data.root /home/alice/data/secret-project "
               "--data.shards https://alice:pa55word@store.example.com/shards/{}?X-Amz-Signature=f00 "
               "--hub.token hf_abcdefghijklmnopqrstuvwxyz0123 # on alice-workstation")
    assert f"<!-- sapiens2-ft:{COMMAND} -->" in card  # the run's own card keeps its command line
    card = card.replace("python train.py", private, 1) + ("\ndata: /home/alice/data/secret-project\nshards: "
                                                         "https://alice:pa55word@store.example.com/shards/{}?sig=f00\n")
    (handed_export / CARD_FILE).write_text(card)
    hub = FakeHub(monkeypatch)
    export.main(["--checkpoint", str(handed_export), "--push_to_hub", "someone/model"])
    sent = hub.sent(CARD_FILE).decode()
    for leak in ("/home/alice", "alice", "pa55word", "X-Amz-Signature", "hf_abcdefghij", "/tmp/", "workstation",
                 f"sapiens2-ft:{COMMAND}"):
        assert leak not in sent, leak
    assert ".../secret-project" in sent and "shards: https://store.example.com/shards/{}\n" in sent
    assert "--data.shards" not in sent  # the command line is gone
    assert "someone/model" in sent and "## Results" in sent
    assert (handed_export / CARD_FILE).read_text() == card  # the local card as it was


# ---------------------------------------------------------------------------------------------------- bombs


@pytest.fixture(scope="module")
def bombs(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("bombs")
    write_bombs(folder)
    return folder


def test_predict_skips_every_bomb_by_name_before_decoding_it(seg_checkpoint, dense_root, bombs, tmp_path, capsys,
                                                            decoded):
    photos = shutil.copytree(bombs, tmp_path / "photos")
    good = next((dense_root / "val" / "images").iterdir())
    shutil.copy(good, photos / good.name)
    out = predict.main(["--model", str(seg_checkpoint), "--input", str(photos), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    for name in BOMBS:
        assert f"{name}: " in err and "above the limit of 100,000,000" in err.split(f"{name}: ", 1)[1], name
    assert [p.name for p in out.glob("*_overlay.png")] == [f"{good.stem}_overlay.png"]
    assert max(h * w for h, w in decoded) < 10**6  # no bomb reached the decoder


@pytest.fixture(scope="module")
def bomb_coco(bombs, tmp_path_factory) -> Path:
    """A COCO dataset whose images are the bombs (one person each, boxes inside the declared size)."""
    root = tmp_path_factory.mktemp("bomb_coco")
    write_coco(root, "val2017", "person_keypoints_val2017.json", num_images=1)
    ann_file = root / "annotations" / "person_keypoints_val2017.json"
    data = json.loads(ann_file.read_text())
    images, annotations = [], []
    for k, name in enumerate(BOMBS, 1):
        shutil.copy(bombs / name, root / "val2017" / name)
        images.append({"id": k, "file_name": name, "width": 12000, "height": 12000})
        annotations.append({**data["annotations"][0], "id": k, "image_id": k})
    ann_file.write_text(json.dumps({**data, "images": images, "annotations": annotations}))
    return root


def test_training_and_check_data_refuse_every_bomb_before_decoding_it(bomb_coco, decoded, capsys):
    from datamodules.errors import DataError
    from datamodules.pose_datamodule import PoseDataModule
    from sapiens2_ft import check_data

    data = PoseDataModule(root=str(bomb_coco), val_ann="annotations/person_keypoints_val2017.json",
                          val_images="val2017", num_workers=0, batch_size=1)
    data.setup("validate")
    for k, name in enumerate(BOMBS):
        with pytest.raises(DataError, match=rf"{name}: .*above the limit of 100,000,000"):
            data.val_set[k]
    assert check_data.main(["--config", "pose_coco.yaml", "--data.root", str(bomb_coco), "--data.train_ann",
                            "annotations/person_keypoints_val2017.json", "--data.train_images", "val2017"]) == 1
    report = capsys.readouterr().out
    for name in BOMBS:
        assert f"{name}: image " in report and "above the limit of 100,000,000" in report, name
    assert decoded == []


def test_convert_leaves_out_every_bomb_before_decoding_it(bombs, tmp_path, decoded):
    from sapiens2_ft.convert import convert

    export_dir = shutil.copytree(bombs, tmp_path / "labelme")
    good = export_dir / "good.png"
    cv2.imwrite(str(good), np.full((40, 30, 3), 90, np.uint8))
    for image in sorted(export_dir.iterdir()):
        (export_dir / f"{image.stem}_{image.suffix[1:]}.json").write_text(json.dumps({"imagePath": image.name, "shapes": [
            {"label": "nose", "points": [[5, 5]], "shape_type": "point"}]}))
    result = convert("labelme", export_dir, tmp_path / "out")
    left_out = {Path(p.file).name for p in result.problems.problems if "above the limit" in p.expected}
    assert left_out == set(BOMBS) and result.splits["train"]["images"] == 1
    assert max(h * w for h, w in decoded) <= 40 * 30


def test_the_test_bombs_are_real(bombs):
    """Each bomb is small on disk and declares more pixels than the limit, so the tests above refuse real bombs."""
    from datamodules.boundary.images import header_size

    for name in BOMBS:
        raw = (bombs / name).read_bytes()
        width, height = header_size(raw)
        assert len(raw) < 200_000 and width * height > 100_000_000, name
