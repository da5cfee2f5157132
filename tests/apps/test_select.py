"""``sapiens2-ft select``: which unlabelled images the model is least sure of. What the scores mean (a pose model
that answers its mirrored crop as the mirror of its answer is judged by its keypoint scores alone; disagreeing lowers
it; a seg model's margin over the people), what the picks are (the most unsure first; with ``--diversity``, spread
over the features), their independence of the images' order, and the command's files."""

from __future__ import annotations

import csv
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from datamodules.keypoints.metainfo import load_metainfo
from sapiens2_ft.labelling.predictions import class_unsure, flip_agreement, mirrored_boxes, pose_unsure
from sapiens2_ft.labelling.select import main as select
from sapiens2_ft.labelling.selection import choose

META = load_metainfo("coco17")
FLIP = np.asarray(META.flip_indices)


class ScriptedPose:
    """A pose inference object whose answers are given: ``answers[0]`` for the images as they are, ``answers[1]`` for
    the mirrored ones (per image, per person: points (K, 2) and scores (K,))."""

    def __init__(self, answers):
        self.answers, self.calls, self.flip_test, self.metainfo = list(answers), [], True, META

    def estimate(self, images, boxes, batch_size):
        self.calls.append((self.flip_test, [b.copy() for b in boxes]))
        return [[{"points": p, "scores": s, "score": float(s.mean()), "bbox": b[k, :4]} for k, (p, s) in
                 enumerate(people)] for people, b in zip(self.answers.pop(0), boxes)]


def mirror_answer(points: np.ndarray, width: int) -> np.ndarray:
    """What a model consistent with itself answers on the mirrored image: each keypoint where its mirror partner
    was, mirrored."""
    out = points[FLIP].copy()
    out[:, 0] = width - 1 - out[:, 0]
    return out


def test_a_self_consistent_pose_model_is_judged_by_its_scores_alone():
    rng = np.random.default_rng(0)
    image = np.zeros((100, 80, 3), np.uint8)
    points, scores = rng.uniform(10, 70, (17, 2)), rng.uniform(0.2, 0.9, 17)
    box = np.array([[5.0, 5.0, 60.0, 90.0, 1.0]])
    model = ScriptedPose([[[(points, scores)]], [[(mirror_answer(points, 80), scores[FLIP])]]])
    [(unsure, feature)] = pose_unsure(model, [image], [box], META.sigmas, 8)
    assert unsure == pytest.approx(1 - scores.mean())
    assert model.flip_test is True and [c[0] for c in model.calls] == [False, False]  # one pass each, restored
    np.testing.assert_allclose(model.calls[1][1][0], mirrored_boxes(box, 80))
    assert feature.shape == (34,)

    shifted = mirror_answer(points, 80) + [6.0, 0.0]  # the mirrored answer 6 px off: they disagree
    model = ScriptedPose([[[(points, scores)]], [[(shifted, scores[FLIP])]]])
    [(unsure_shifted, _)] = pose_unsure(model, [image], [box], META.sigmas, 8)
    assert unsure_shifted > unsure + 0.05


def test_mirrored_boxes_and_flip_agreement():
    box = np.array([[10.0, 5.0, 20.0, 30.0, 0.7]])
    mirrored = mirrored_boxes(box, 100)
    assert mirrored[0, 0] + mirrored[0, 2] / 2 == 100 - 1 - (10 + 20 / 2)  # the centre mirrored as a pixel is
    np.testing.assert_allclose(mirrored_boxes(mirrored, 100), box)
    a = np.random.default_rng(1).uniform(0, 50, (17, 2))
    assert flip_agreement(a, a, 2500.0, META.sigmas) == pytest.approx(1.0)
    assert flip_agreement(a, a + 40, 2500.0, META.sigmas) < 0.01
    assert flip_agreement(a, a + 2, 2500.0, META.sigmas) > flip_agreement(a, a + 4, 2500.0, META.sigmas)


def test_a_class_model_is_unsure_where_two_classes_are_close_on_the_people():
    sure = torch.zeros(3, 4, 4)
    sure[0, :, :2], sure[1, :, 2:] = 1.0, 1.0  # background left, class 1 right, no doubt
    assert class_unsure(sure)[0] == pytest.approx(0.0)
    torn = sure.clone()
    torn[1, :, 2:], torn[2, :, 2:] = 0.5, 0.5  # the people torn between classes 1 and 2
    assert class_unsure(torn)[0] == pytest.approx(1.0)
    doubt_on_background = sure.clone()
    doubt_on_background[0, :, :2], doubt_on_background[2, :, :2] = 0.99, 0.01  # margins of the background count little
    assert class_unsure(doubt_on_background)[0] < 0.05
    assert class_unsure(torch.cat([torch.ones(1, 4, 4), torch.zeros(2, 4, 4)]))[0] == 0.0  # nobody: nothing to label
    perm = torch.randperm(16)
    shuffled = torn.flatten(1)[:, perm].reshape(3, 4, 4)
    assert class_unsure(shuffled)[0] == pytest.approx(class_unsure(torn)[0])  # where the pixels are does not matter
    np.testing.assert_allclose(class_unsure(torn)[1], [0, 0.5, 0.5], atol=1e-6)


def test_choose_takes_the_most_unsure_and_spreads_with_diversity():
    unsure = [0.9, 0.85, 0.8, 0.5, 0.1]
    features = [np.array([0.0, 0.0]), np.array([0.01, 0.0]), np.array([0.0, 0.01]), np.array([5.0, 5.0]),
                np.array([9.0, 0.0])]
    assert choose(unsure, features, 3) == [0, 1, 2]
    assert choose(unsure, features, 3, diversity=0.5) == [0, 3, 4]  # near-duplicates of the first wait
    assert choose([0.5, 0.5, 0.5], None, 2) == [0, 1]  # ties: the first in name order
    assert choose(unsure, features, 10) == [0, 1, 2, 3, 4]
    with pytest.raises(ValueError, match="diversity"):
        choose(unsure, features, 2, diversity=1.5)


def test_choose_does_not_depend_on_the_order_of_images():
    rng = np.random.default_rng(2)
    unsure, features = rng.random(30).tolist(), list(rng.normal(size=(30, 4)))
    for diversity in (0.0, 0.6):
        picked = choose(unsure, features, 8, diversity)
        order = rng.permutation(30)
        again = choose([unsure[i] for i in order], [features[i] for i in order], 8, diversity)
        assert [int(order[i]) for i in again] == picked


@pytest.fixture(scope="module")
def unlabelled(tiny_coco, tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("unlabelled") / "in"
    shutil.copytree(tiny_coco / "train2017", folder)
    return folder


def test_select_writes_the_list_the_ranking_and_the_pre_annotations(tiny_pose308_dir, unlabelled, tmp_path):
    out = tmp_path / "out"
    assert select(["--model", str(tiny_pose308_dir), "--keypoints", "coco17", "--input", str(unlabelled),
                   "--budget", "2", "--out", str(out), "--whole_image", "--workers", "0",
                   "--format", "labelstudio"]) == 0
    picked = (out / "selected.txt").read_text().split()
    rows = list(csv.DictReader((out / "ranking.csv").open()))
    assert len(picked) == 2 and len(rows) == 4
    assert [r["image"] for r in rows[:2]] == picked  # diversity 0: the two most unsure, most unsure first
    assert [float(r["unsure"]) for r in rows] == sorted((float(r["unsure"]) for r in rows), reverse=True)
    assert all(0 <= float(r["unsure"]) <= 1 for r in rows)
    tasks = json.loads((out / "tasks.json").read_text())
    assert [t["data"]["image"] for t in tasks] == [f"/data/local-files/?d=in/{k}" for k in picked]

    renamed = tmp_path / "renamed"  # other names, the same pixels: the same scores
    renamed.mkdir()
    for p in unlabelled.iterdir():
        shutil.copy(p, renamed / f"x_{p.name}")
    assert select(["--model", str(tiny_pose308_dir), "--keypoints", "coco17", "--input", str(renamed),
                   "--budget", "2", "--out", str(tmp_path / "out2"), "--whole_image", "--workers", "0"]) == 0
    again = {r["image"]: r["unsure"] for r in csv.DictReader((tmp_path / "out2" / "ranking.csv").open())}
    assert again == {f"x_{r['image']}": r["unsure"] for r in rows}
    assert not (tmp_path / "out2" / "tasks.json").exists()  # no --format: the list only


def test_select_a_seg_model(seg_checkpoint, dense_root, tmp_path):
    out = tmp_path / "out"
    assert select(["--model", str(seg_checkpoint), "--input", str(dense_root / "train" / "images"), "--budget", "3",
                   "--out", str(out), "--diversity", "0.5", "--workers", "0", "--format", "cvat"]) == 0
    picked = (out / "selected.txt").read_text().split()
    assert len(picked) == 3 and len(set(picked)) == 3
    assert (out / "labelmap.txt").is_file() and len(list((out / "SegmentationClass").glob("*.png"))) == 3


def test_select_refuses_bad_arguments_and_links_leading_out(tiny_pose308_dir, unlabelled, tmp_path, capsys):
    base = ["--model", str(tiny_pose308_dir), "--keypoints", "coco17", "--whole_image", "--workers", "0"]
    with pytest.raises(SystemExit) as refused:  # every problem in one message, exit status 1
        select(base + ["--input", str(unlabelled), "--budget", "0", "--diversity", "2", "--out",
                       str(unlabelled / "out")])
    err = str(refused.value.code)
    assert "--budget: at least 1" in err and "--diversity: a weight in [0, 1]" in err and "inside --input" in err
    folder = tmp_path / "in"
    shutil.copytree(unlabelled, folder)
    secret = tmp_path / "secret.jpg"
    shutil.copy(next(unlabelled.iterdir()), secret)
    os.symlink(secret, folder / "zz.jpg")
    assert select(base + ["--input", str(folder), "--budget", "9", "--out", str(tmp_path / "out")]) == 0
    assert "zz.jpg is a link leading out" in capsys.readouterr().err
    assert "zz.jpg" not in (tmp_path / "out" / "ranking.csv").read_text()


def test_select_scores_every_person_of_the_boxes_given(tiny_pose308_dir, unlabelled, tiny_coco, tmp_path):
    """With --boxes (two people an image) an image's unsureness is the mean of its people's, each as the library
    computes it on those boxes."""
    import sapiens2_ft.labelling.select as select_module
    from sapiens2_ft.predict.boxes import FileBoxes, read_boxes
    from sapiens2_ft.predict.inputs import list_images
    from sapiens2_ft.predict.loading import load_inference

    boxes = tiny_coco / "annotations" / "person_keypoints_train2017.json"
    out = tmp_path / "out"
    assert select(["--model", str(tiny_pose308_dir), "--keypoints", "coco17", "--input", str(unlabelled),
                   "--budget", "1", "--out", str(out), "--boxes", str(boxes), "--workers", "0"]) == 0
    written = {r["image"]: float(r["unsure"]) for r in csv.DictReader((out / "ranking.csv").open())}
    inference, _ = load_inference(str(tiny_pose308_dir), tmp_path, "coco17")
    images = list_images(unlabelled)
    found = select_module.unsure_images(inference, images, FileBoxes(read_boxes(boxes, list(images))[1]), workers=0)
    assert written == {k: round(v[0], 4) for k, v in found.items()}
    assert max(written, key=written.get) == (out / "selected.txt").read_text().split()[0]
