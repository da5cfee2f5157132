"""Tests for the procedural synthetic dataset generator (datamodules.synthetic)."""

import json
import os

os.environ.setdefault("WANDB_MODE", "offline")

import cv2
import numpy as np
import pytest
from pycocotools.coco import COCO

from datamodules.keypoints.metainfo import load_metainfo
from datamodules.synthetic import (
    COCO_KEYPOINT_NAMES,
    KEYPOINT_NAMES,
    SAPIENS2_PART_CLASSES,
    ensure_dataset,
    generate_dataset,
    render_sample,
)
from datamodules.synthetic.__main__ import main as cli_main
from datamodules.synthetic.camera import back_project
from datamodules.synthetic.parts import PART_ID

SEED = 7
NUM = 10
HEIGHT, WIDTH = 256, 192
DENSE = ("images", "labels", "normals", "masks", "depth", "intrinsics", "alpha", "foreground", "albedo")
MANNEQUIN_CLASSES = {
    "Background", "Face_Neck", "Hair", "Torso", "Upper_Clothing", "Lower_Clothing",
    "Left_Upper_Arm", "Left_Lower_Arm", "Left_Hand", "Right_Upper_Arm", "Right_Lower_Arm", "Right_Hand",
    "Left_Upper_Leg", "Left_Lower_Leg", "Left_Foot", "Left_Shoe",
    "Right_Upper_Leg", "Right_Lower_Leg", "Right_Foot", "Right_Shoe",
}
# Labels a visible keypoint may plausibly land near (clothing covers limbs).
EXPECTED_NEAR = {
    "nose": {"Face_Neck", "Hair"}, "left_eye": {"Face_Neck", "Hair"}, "right_eye": {"Face_Neck", "Hair"},
    "left_ear": {"Face_Neck", "Hair"}, "right_ear": {"Face_Neck", "Hair"},
    "left_shoulder": {"Torso", "Upper_Clothing", "Left_Upper_Arm"},
    "right_shoulder": {"Torso", "Upper_Clothing", "Right_Upper_Arm"},
    "left_elbow": {"Left_Upper_Arm", "Left_Lower_Arm", "Upper_Clothing"},
    "right_elbow": {"Right_Upper_Arm", "Right_Lower_Arm", "Upper_Clothing"},
    "left_wrist": {"Left_Lower_Arm", "Left_Hand", "Upper_Clothing"},
    "right_wrist": {"Right_Lower_Arm", "Right_Hand", "Upper_Clothing"},
    "left_hip": {"Torso", "Lower_Clothing", "Left_Upper_Leg"},
    "right_hip": {"Torso", "Lower_Clothing", "Right_Upper_Leg"},
    "left_knee": {"Left_Upper_Leg", "Left_Lower_Leg", "Lower_Clothing"},
    "right_knee": {"Right_Upper_Leg", "Right_Lower_Leg", "Lower_Clothing"},
    "left_ankle": {"Left_Lower_Leg", "Left_Foot", "Left_Shoe", "Lower_Clothing"},
    "right_ankle": {"Right_Lower_Leg", "Right_Foot", "Right_Shoe", "Lower_Clothing"},
    "left_heel": {"Left_Foot", "Left_Shoe", "Left_Lower_Leg"},
    "right_heel": {"Right_Foot", "Right_Shoe", "Right_Lower_Leg"},
    "left_toe": {"Left_Foot", "Left_Shoe"}, "right_toe": {"Right_Foot", "Right_Shoe"},
}


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("synthetic") / "data"
    summary = generate_dataset(root, NUM, SEED, HEIGHT, WIDTH, val_fraction=0.2, progress=False)
    return root, summary


def _stems(root, split):
    return sorted(p.stem for p in (root / split / "images").glob("*.png"))


def _load(root, split, stem):
    d = root / split
    return {
        "image": cv2.imread(str(d / "images" / f"{stem}.png"), cv2.IMREAD_UNCHANGED),
        "labels": cv2.imread(str(d / "labels" / f"{stem}.png"), cv2.IMREAD_UNCHANGED),
        "mask": cv2.imread(str(d / "masks" / f"{stem}.png"), cv2.IMREAD_UNCHANGED),
        "alpha": cv2.imread(str(d / "alpha" / f"{stem}.png"), cv2.IMREAD_UNCHANGED),
        "foreground": cv2.imread(str(d / "foreground" / f"{stem}.png"), cv2.IMREAD_UNCHANGED),
        "albedo": cv2.imread(str(d / "albedo" / f"{stem}.png"), cv2.IMREAD_UNCHANGED),
        "normals": np.load(d / "normals" / f"{stem}.npy"),
        "depth": np.load(d / "depth" / f"{stem}.npy"),
        "K": np.loadtxt(d / "intrinsics" / f"{stem}.txt"),
    }


def _all_samples(root):
    for split in ("train", "val"):
        for stem in _stems(root, split):
            yield split, stem, _load(root, split, stem)


def _tree_bytes(root):
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_part_table():
    assert len(SAPIENS2_PART_CLASSES) == 29
    assert SAPIENS2_PART_CLASSES[0] == "Background" and SAPIENS2_PART_CLASSES[28] == "Tongue"
    assert PART_ID["Face_Neck"] == 3 and PART_ID["Torso"] == 22 and PART_ID["Upper_Clothing"] == 23
    assert len(COCO_KEYPOINT_NAMES) == 17 and COCO_KEYPOINT_NAMES[5] == "left_shoulder"


def test_layout_and_splits(dataset):
    root, summary = dataset
    info = json.loads((root / "dataset.json").read_text())
    assert {k: info[k] for k in ("num", "seed", "height", "width", "val_fraction")} == {
        "num": NUM, "seed": SEED, "height": HEIGHT, "width": WIDTH, "val_fraction": 0.2}
    assert summary["counts"]["train"]["images"] == 8 and summary["counts"]["val"]["images"] == 2
    train, val = _stems(root, "train"), _stems(root, "val")
    assert train == [f"{i:06d}" for i in range(8)] and val == ["000008", "000009"]
    for split, stems in (("train", train), ("val", val)):
        for folder in DENSE:
            assert sorted(p.stem for p in (root / split / folder).iterdir()) == stems
    assert not [p for p in root.parent.iterdir() if p.name.startswith(".")]  # no staging leftovers


def test_same_seed_identical_and_other_seed_differs(tmp_path, dataset):
    root, _ = dataset
    again = tmp_path / "again"
    generate_dataset(again, NUM, SEED, HEIGHT, WIDTH, progress=False)
    assert _tree_bytes(again) == _tree_bytes(root)
    other = tmp_path / "other"
    generate_dataset(other, 3, SEED + 1, HEIGHT, WIDTH, progress=False)
    for stem in _stems(other, "train"):
        image = f"train/images/{stem}.png"
        assert (other / image).read_bytes() != (root / image).read_bytes()


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # pycocotools vs numpy 2
def test_coco_annotations(dataset):
    root, _ = dataset
    ann_ids, img_ids = set(), set()
    for split in ("train", "val"):
        coco = COCO(str(root / "annotations" / f"{split}.json"))
        category = coco.loadCats(1)[0]
        assert category["name"] == "person" and list(category["keypoints"]) == list(KEYPOINT_NAMES)
        assert list(KEYPOINT_NAMES) == list(load_metainfo("coco17_feet").keypoint_names)  # the demo's set
        assert all(1 <= a <= 21 and 1 <= b <= 21 for a, b in category["skeleton"])
        assert len(coco.getAnnIds()) > 0
        for image in coco.loadImgs(coco.getImgIds()):
            assert (root / split / "images" / image["file_name"]).is_file()
            assert (image["height"], image["width"]) == (HEIGHT, WIDTH)
            assert image["id"] not in img_ids
            img_ids.add(image["id"])
        for ann in coco.loadAnns(coco.getAnnIds()):
            assert ann["id"] > 0 and ann["id"] not in ann_ids
            ann_ids.add(ann["id"])
            assert ann["category_id"] == 1 and ann["iscrowd"] == 0
            kps = np.array(ann["keypoints"], dtype=float).reshape(len(KEYPOINT_NAMES), 3)
            assert set(np.unique(kps[:, 2])) <= {0, 1, 2}
            assert ann["num_keypoints"] == int((kps[:, 2] > 0).sum()) > 0
            assert np.all(kps[kps[:, 2] == 0, :2] == 0)
            labelled = kps[kps[:, 2] > 0]
            assert np.all((labelled[:, 0] >= 0) & (labelled[:, 0] <= WIDTH - 1))
            assert np.all((labelled[:, 1] >= 0) & (labelled[:, 1] <= HEIGHT - 1))
            x, y, w, h = ann["bbox"]
            assert w > 0 and h > 0 and x >= 0 and y >= 0 and x + w <= WIDTH and y + h <= HEIGHT
            assert 0.01 * HEIGHT * WIDTH <= ann["area"] <= w * h
            silhouette = coco.annToMask(ann)
            assert silhouette.sum() == ann["area"]
            ys, xs = np.nonzero(silhouette)
            assert [xs.min(), ys.min(), xs.max() - xs.min() + 1, ys.max() - ys.min() + 1] == [x, y, w, h]


def test_dense_outputs_agree(dataset):
    root, _ = dataset
    allowed = {PART_ID[name] for name in MANNEQUIN_CLASSES}
    angles = []
    for _, _, s in _all_samples(root):
        assert s["image"].shape == (HEIGHT, WIDTH, 3) and s["image"].dtype == np.uint8
        assert s["foreground"].shape == (HEIGHT, WIDTH, 3)
        assert s["normals"].shape == (HEIGHT, WIDTH, 3) and s["normals"].dtype == np.float32
        assert s["depth"].shape == (HEIGHT, WIDTH) and s["depth"].dtype == np.float32
        assert s["K"].shape == (3, 3) and s["K"][2].tolist() == [0, 0, 1] and s["K"][0, 0] > 0
        assert set(np.unique(s["mask"])) <= {0, 255}
        mask = s["mask"] > 0
        assert mask.any()
        # Labels, normals and depth are defined exactly on the mask.
        assert set(np.unique(s["labels"])) <= allowed
        assert np.all((s["labels"] > 0) == mask)
        norms = np.linalg.norm(s["normals"], axis=-1)
        assert np.allclose(norms[mask], 1.0, atol=1e-4) and np.all(s["normals"][~mask] == 0)
        assert np.all(s["depth"][mask] > 0) and np.all(s["depth"][~mask] == 0)
        # Alpha: opaque in the mask core, transparent away from figures, soft in between.
        core = cv2.erode(s["mask"], np.ones((3, 3), np.uint8)) > 0
        far = cv2.dilate(s["mask"], np.ones((5, 5), np.uint8)) == 0
        assert np.all(s["alpha"][core] >= 250) and np.all(s["alpha"][far] == 0)
        assert np.any((s["alpha"] > 0) & (s["alpha"] < 255))
        assert np.all(s["foreground"][s["alpha"] == 0] == 0)
        # Albedo: the base colour on the mask, which the figure's colour is a shade of (one lighting factor per
        # pixel for the three channels, between the ambient light, at least 0.25, and 1).
        assert s["albedo"].shape == (HEIGHT, WIDTH, 3) and np.all(s["albedo"][~mask] == 0)
        albedo, foreground = s["albedo"][core].astype(float), s["foreground"][core].astype(float)
        bright = (albedo >= 64).all(axis=1)
        shade = foreground[bright] / albedo[bright]
        assert np.all(np.ptp(shade, axis=1) < 0.03) and 0.23 < shade.min() and shade.max() < 1.02
        assert np.median(shade) < 0.95  # lit, not a copy of the colour
        # Finite-difference normals of back-projected depth match the stored normals.
        points = back_project(s["K"], s["depth"].astype(np.float64))
        tangent_u = points[1:-1, 2:] - points[1:-1, :-2]
        tangent_v = points[2:, 1:-1] - points[:-2, 1:-1]
        estimate = np.cross(tangent_v, tangent_u)  # outward (towards the camera) for x right, y down
        estimate /= np.linalg.norm(estimate, axis=-1, keepdims=True) + 1e-12
        interior = (cv2.erode(s["mask"], np.ones((5, 5), np.uint8)) > 0)[1:-1, 1:-1]
        cosine = np.clip((estimate * s["normals"][1:-1, 1:-1]).sum(-1)[interior], -1, 1)
        angles.append(np.degrees(np.arccos(cosine)))
        assert np.median(s["normals"][mask][:, 2]) < 0  # surfaces face the camera
    assert np.median(np.concatenate(angles)) < 10.0


def test_visible_keypoints_land_on_their_parts(dataset):
    root, _ = dataset
    checked = plausible = 0
    for split in ("train", "val"):
        coco = json.loads((root / "annotations" / f"{split}.json").read_text())
        names = {image["id"]: image["file_name"] for image in coco["images"]}
        for ann in coco["annotations"]:
            s = _load(root, split, names[ann["image_id"]][:-4])
            kps = np.array(ann["keypoints"], dtype=float).reshape(len(KEYPOINT_NAMES), 3)
            for k, (x, y, v) in enumerate(kps):
                if v != 2:
                    continue
                r, c = int(round(y)), int(round(x))
                window = np.s_[max(r - 1, 0):r + 2, max(c - 1, 0):c + 2]
                assert s["mask"][window].any() and s["labels"][window].any()
                near = s["labels"][max(r - 2, 0):r + 3, max(c - 2, 0):c + 3]
                expected = {PART_ID[name] for name in EXPECTED_NEAR[KEYPOINT_NAMES[k]]}
                checked += 1
                plausible += bool(expected & set(near.ravel().tolist()))
    assert checked > 50
    assert plausible / checked > 0.9


def test_left_is_the_persons_own_left(dataset):
    """A figure whose eyes are both visible faces the camera, so its left eye is on the image right."""
    root, _ = dataset
    both = left_on_right = 0
    for split in ("train", "val"):
        for ann in json.loads((root / "annotations" / f"{split}.json").read_text())["annotations"]:
            kps = np.array(ann["keypoints"], dtype=float).reshape(len(KEYPOINT_NAMES), 3)
            if kps[1, 2] == 2 and kps[2, 2] == 2 and kps[5, 2] == 2 and kps[6, 2] == 2:
                both += 1
                left_on_right += kps[1, 0] > kps[2, 0] and kps[5, 0] > kps[6, 0]
    assert both >= 2 and left_on_right / both > 0.9


def test_figures_fill_the_frame_and_occlude_each_other():
    spans, occluded_by_other = [], 0
    for index in range(30):
        sample = render_sample(SEED, index, HEIGHT, WIDTH)
        rows = np.flatnonzero(sample.people[0].silhouette.any(axis=1))
        spans.append((rows[-1] - rows[0] + 1) / HEIGHT if len(rows) else 0.0)
        for i, person in enumerate(sample.people):
            for x, y, v in person.keypoints:
                if v == 1:
                    seen = sample.figure_map[int(round(y)), int(round(x))]
                    occluded_by_other += seen >= 0 and seen != i
        assert 1 <= len(sample.people) <= 3
    assert 0.4 <= np.median(spans) <= 0.95
    assert occluded_by_other > 0


def test_ensure_dataset_is_idempotent_and_regenerates(tmp_path):
    root = tmp_path / "demo"
    assert ensure_dataset(root, 3, 1, 64, 48, val_fraction=0.34) == root.absolute()
    marker = root / "dataset.json"
    image = root / "train/images/000000.png"
    stamps = (marker.stat().st_mtime_ns, image.stat().st_mtime_ns)
    ensure_dataset(root, 3, 1, 64, 48, val_fraction=0.34)
    assert (marker.stat().st_mtime_ns, image.stat().st_mtime_ns) == stamps
    ensure_dataset(root, 4, 1, 64, 48, val_fraction=0.34)
    assert json.loads(marker.read_text())["num"] == 4
    assert len(list((root / "train/images").iterdir())) + len(list((root / "val/images").iterdir())) == 4


def test_a_dataset_of_the_previous_version_is_rendered_again_with_its_albedo(tmp_path):
    """Version 2 had no albedo/: its dataset.json no longer matches, so the data modules' ``ensure_dataset``
    renders it again (the other files come out as version 2 wrote them: the albedo draws nothing at random)."""
    root = tmp_path / "old"
    generate_dataset(root, 2, 1, 64, 48, val_fraction=0.5, progress=False)
    before = {k: v for k, v in _tree_bytes(root).items() if "/albedo/" not in k and k != "dataset.json"}
    info = json.loads((root / "dataset.json").read_text())
    (root / "dataset.json").write_text(json.dumps({**info, "version": 2}))
    for split in ("train", "val"):
        for path in (root / split / "albedo").iterdir():
            path.unlink()
        (root / split / "albedo").rmdir()
    ensure_dataset(root, 2, 1, 64, 48, val_fraction=0.5)
    after = _tree_bytes(root)
    assert json.loads(after["dataset.json"])["version"] == 3 and "train/albedo/000000.png" in after
    assert {k: v for k, v in after.items() if "/albedo/" not in k and k != "dataset.json"} == before


def test_refuses_foreign_directories(tmp_path):
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep me")
    with pytest.raises(FileExistsError, match="not a synthetic dataset"):
        ensure_dataset(foreign, 2, 0, 64, 48)
    assert (foreign / "notes.txt").read_text() == "keep me" and len(list(foreign.iterdir())) == 1
    # A previous dataset with a user's file inside is not replaced either.
    data = tmp_path / "data"
    generate_dataset(data, 2, 0, 64, 48, progress=False)
    (data / "train/images/extra.txt").write_text("user file")
    with pytest.raises(FileExistsError, match="did not write"):
        generate_dataset(data, 3, 0, 64, 48, progress=False)
    assert (data / "train/images/extra.txt").exists()


def test_a_dataset_whose_annotations_were_indexed_is_replaced(tmp_path, monkeypatch):
    """The data modules cache an index of each annotation file in the user's cache, not in the dataset: a dataset
    they have read is still the generator's own, and a newer generator version (or other parameters) replaces it."""
    from datamodules.pose_datamodule import PoseDataModule

    data = tmp_path / "data"
    monkeypatch.setenv("SAPIENS2_FT_CACHE", str(tmp_path / "cache"))
    generate_dataset(data, 2, 0, 64, 48, val_fraction=0.5, progress=False)
    PoseDataModule(root=str(data), keypoints="coco17_feet", input_size=(64, 48), num_workers=0).setup("fit")
    assert list((tmp_path / "cache" / "index").iterdir())
    assert sorted(p.name for p in (data / "annotations").iterdir()) == ["train.json", "val.json"]
    generate_dataset(data, 4, 0, 64, 48, val_fraction=0.5, progress=False)
    assert json.loads((data / "dataset.json").read_text())["num"] == 4


def test_interrupted_generation_leaves_nothing(tmp_path, monkeypatch):
    import datamodules.synthetic.generate as generate_module

    real_render = generate_module.render_sample

    def failing_render(seed, index, *args):
        if index == 2:
            raise KeyboardInterrupt
        return real_render(seed, index, *args)

    monkeypatch.setattr(generate_module, "render_sample", failing_render)
    with pytest.raises(KeyboardInterrupt):
        generate_dataset(tmp_path / "data", 4, 0, 64, 48, progress=False)
    assert list(tmp_path.iterdir()) == []


def test_cli(tmp_path, capsys):
    cli_main(["--out", str(tmp_path / "cli"), "--num", "2", "--seed", "3", "--height", "64", "--width", "48",
              "--val_fraction", "0.5", "--no_progress"])
    summary = json.loads(capsys.readouterr().out)
    assert summary["counts"]["train"]["images"] == 1 and summary["counts"]["val"]["images"] == 1
    with pytest.raises(SystemExit):
        cli_main(["--out", str(tmp_path / "cli"), "--num", "0", "--no_progress"])
