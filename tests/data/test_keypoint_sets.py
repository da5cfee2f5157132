"""The built-in Sapiens2-308 and COCO-WholeBody-133 sets, head transfers between sets by name, per-group AP,
and the pose_308.yaml recipe.

Facts checked against facebookresearch/sapiens2 @ 3098c14, pose/configs/_base_/keypoints308.py and
pose/src/evaluators/keypoints308_evaluator.py (retyped here, not read from there).
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from conftest import COCO17, write_coco
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval
from safetensors.torch import load_file

from datamodules.keypoints.metainfo import BUILTIN_DIR, load_metainfo
from sapiens2_ft.tasks.pose.metric import CocoKeypointAP
from sapiens2_ft.tasks.registry import build_task_model
from sapiens2_ft.training.cli import main

REPO = Path(__file__).resolve().parents[2]
INPUT = (256, 192)
FINGERS = ["thumb", "forefinger", "middle_finger", "ring_finger", "pinky_finger"]
# COCO-WholeBody OKS sigmas (jin-s13/COCO-WholeBody, evaluation/myeval_wholebody.py), in set order.
WHOLEBODY_SIGMAS = [
    0.026, 0.025, 0.025, 0.035, 0.035, 0.079, 0.079, 0.072, 0.072, 0.062, 0.062, 0.107, 0.107, 0.087, 0.087,
    0.089, 0.089, 0.068, 0.066, 0.066, 0.092, 0.094, 0.094, 0.042, 0.043, 0.044, 0.043, 0.040, 0.035, 0.031,
    0.025, 0.020, 0.023, 0.029, 0.032, 0.037, 0.038, 0.043, 0.041, 0.045, 0.013, 0.012, 0.011, 0.011, 0.012,
    0.012, 0.011, 0.011, 0.013, 0.015, 0.009, 0.007, 0.007, 0.007, 0.012, 0.009, 0.008, 0.016, 0.010, 0.017,
    0.011, 0.009, 0.011, 0.009, 0.007, 0.013, 0.008, 0.011, 0.012, 0.010, 0.034, 0.008, 0.008, 0.009, 0.008,
    0.008, 0.007, 0.010, 0.008, 0.009, 0.009, 0.009, 0.007, 0.007, 0.008, 0.011, 0.008, 0.008, 0.008, 0.010,
    0.008, 0.029, 0.022, 0.035, 0.037, 0.047, 0.026, 0.025, 0.024, 0.035, 0.018, 0.024, 0.022, 0.026, 0.017,
    0.021, 0.021, 0.032, 0.020, 0.019, 0.022, 0.031, 0.029, 0.022, 0.035, 0.037, 0.047, 0.026, 0.025, 0.024,
    0.035, 0.018, 0.024, 0.022, 0.026, 0.017, 0.021, 0.021, 0.032, 0.020, 0.019, 0.022, 0.031,
]  # fmt: skip
FEET = ["left_big_toe", "left_small_toe", "left_heel", "right_big_toe", "right_small_toe", "right_heel"]
EXTRA_308 = ["neck", "left_olecranon", "right_olecranon", "left_cubital_fossa", "right_cubital_fossa",
             "left_acromion", "right_acromion"]


def _wholebody_names() -> list[str]:
    names = COCO17 + FEET + [f"face-{i}" for i in range(68)]
    for side in ("left", "right"):
        names += [f"{side}_hand_root"] + [f"{side}_{f}{j}" for f in FINGERS for j in range(1, 5)]
    return names


# --------------------------------------------------------------------- the sets
def test_308_names_rows_and_halves():
    meta = load_metainfo("sapiens2_308")
    names = meta.keypoint_names
    assert meta.num_keypoints == 308 == len(set(names))
    assert [names.index(n) for n in COCO17] == [0, 1, 2, 3, 4, 5, 6, 7, 8, 62, 41, 9, 10, 11, 12, 13, 14]
    assert not [n for n in names if n.startswith("teeth")]  # Goliath's 344 minus 36 teeth
    assert names[15:21] == tuple(FEET)
    assert names[41] == "right_wrist" and names[21:25] == ("right_thumb4", "right_thumb3", "right_thumb2",
                                                            "right_thumb_third_joint")
    assert names[-1] == "r_border_of_pupil_midpoint_2"
    assert len(meta.upper_body_ids) == 51 and len(meta.lower_body_ids) == 12
    assert not set(meta.upper_body_ids) & set(meta.lower_body_ids)
    assert len(meta.skeleton) == 65
    assert (meta.index("left_ankle"), meta.index("left_knee")) in meta.skeleton


def test_308_sigmas_by_name():
    meta = load_metainfo("sapiens2_308")
    sigma = dict(zip(meta.keypoint_names, meta.sigmas))
    wholebody = dict(zip(_wholebody_names(), WHOLEBODY_SIGMAS))
    shared = [n for n in meta.keypoint_names if n in wholebody]
    assert len(shared) == 53
    assert all(sigma[n] == wholebody[n] for n in shared)  # COCO-WholeBody's, by name
    custom = {"thumb_third_joint": 0.022, "forefinger_third_joint": 0.026, "middle_finger_third_joint": 0.018,
              "ring_finger_third_joint": 0.017, "pinky_finger_third_joint": 0.02}
    for side in ("left", "right"):
        for name, value in custom.items():
            assert sigma[f"{side}_{name}"] == value
        assert sigma[f"{side}_olecranon"] == sigma[f"{side}_cubital_fossa"] == 0.072  # as the elbow
        assert sigma[f"{side}_acromion"] == 0.079  # as the shoulder
    assert sigma["neck"] == 0.079
    rest = [n for n in meta.keypoint_names if n not in wholebody and sigma[n] != 0.010]
    assert rest == [n for n in meta.keypoint_names if "third_joint" in n or n in EXTRA_308]


def test_308_mirror_pairs():
    meta = load_metainfo("sapiens2_308")
    flip, names = meta.flip_indices, meta.keypoint_names
    assert len(meta.flip_pairs) == 146
    assert all(flip[flip[k]] == k for k in range(308))
    centre = [names[k] for k in range(308) if flip[k] == k]
    assert len(centre) == 308 - 2 * 146 and "nose" in centre and "neck" in centre and "tip_of_chin" in centre
    partner = {names[k]: names[flip[k]] for k in range(308)}
    assert partner["left_wrist"] == "right_wrist" and partner["left_thumb_third_joint"] == "right_thumb_third_joint"
    assert partner["upper_startpoint_of_r_eyebrow"] == "upper_startpoint_of_l_eyebrow"
    assert partner["l_center_of_pupil"] == "r_center_of_pupil"
    assert partner["l_border_of_pupil_3"] == "r_border_of_pupil_9"  # a mirror turns 3 o'clock into 9
    # Upstream's swap, kept as is: the right ear's inner-helix points 2 and 8 are exchanged in its order.
    assert partner["l_point_2_of_inner_helix"] == "r_point_8_of_inner_helix"
    assert partner["l_point_8_of_inner_helix"] == "r_point_2_of_inner_helix"
    assert partner["r_outer_corner_of_nose"] == "l_outer_corner_of_nose"
    # 112 pairs are spelled l_/r_ (or *_of_l_*) and need the YAML's swap entries.
    assert len(meta.to_dict()["swap"]) == 112


def test_308_groups_as_the_upstream_evaluator():
    meta = load_metainfo("sapiens2_308")
    groups = {g: [meta.keypoint_names[i] for i in ids] for g, ids in meta.group_ids.items()}
    assert {g: len(v) for g, v in groups.items()} == {"body": 17, "foot": 6, "face": 238, "left_hand": 20,
                                                      "right_hand": 20}
    assert groups["body"] == COCO17 and groups["foot"] == FEET
    hand = [f"{f}{j}" for f in FINGERS for j in ("4", "3", "2", "_third_joint")]
    assert groups["left_hand"] == [f"left_{h}" for h in hand]
    assert groups["right_hand"] == [f"right_{h}" for h in hand]
    members = [n for v in groups.values() for n in v]
    assert len(members) == len(set(members)) == 301
    assert sorted(set(meta.keypoint_names) - set(members)) == sorted(EXTRA_308)  # whole-body AP only


def test_coco_wholebody_names_sigmas_pairs_groups():
    meta = load_metainfo("coco_wholebody")
    assert list(meta.keypoint_names) == _wholebody_names()
    assert list(meta.sigmas) == WHOLEBODY_SIGMAS
    partner = {meta.keypoint_names[k]: meta.keypoint_names[j] for k, j in enumerate(meta.flip_indices)}
    assert len(meta.flip_pairs) == 61
    assert partner["face-0"] == "face-16" and partner["face-36"] == "face-45" and partner["face-30"] == "face-30"
    assert partner["left_hand_root"] == "right_hand_root" and partner["left_heel"] == "right_heel"
    sizes = {g: (ids[0], len(ids)) for g, ids in meta.group_ids.items()}
    assert sizes == {"body": (0, 17), "foot": (17, 6), "face": (23, 68), "left_hand": (91, 21),
                     "right_hand": (112, 21)}
    assert all(ids == list(range(ids[0], ids[0] + len(ids))) for ids in meta.group_ids.values())
    assert len(meta.skeleton) == 65


def test_133_and_308_share_53_names():
    """Upstream's 133 -> 308 index map pairs exactly the keypoints whose names are equal."""
    shared = set(load_metainfo("coco_wholebody").keypoint_names) & set(load_metainfo("sapiens2_308").keypoint_names)
    hands = {f"{side}_{f}{j}" for side in ("left", "right") for f in FINGERS for j in (2, 3, 4)}
    assert shared == set(COCO17) | set(FEET) | hands


def test_bundled_data_carries_its_licence():
    licence = BUILTIN_DIR / "LICENSE-sapiens2.md"
    assert "# Sapiens2 License" in licence.read_text()
    for name in ("sapiens2_308", "coco_wholebody"):
        header = (BUILTIN_DIR / f"{name}.yaml").read_text().split("\nname:")[0]
        for fragment in ("facebookresearch/sapiens2", "3098c14", "pose/configs/_base_/keypoints308.py",
                         "LICENSE-sapiens2.md"):
            assert fragment in header, (name, fragment)
    package_data = (REPO / "pyproject.toml").read_text()
    assert '"keypoints/*.yaml"' in package_data and '"keypoints/*.md"' in package_data


# -------------------------------------------------------------------- transfers
def _raw_rows(path: Path) -> tuple[torch.Tensor, torch.Tensor]:
    raw = load_file(str(path / "model.safetensors"))
    return raw["decode_head.conv_pose.weight"], raw["decode_head.conv_pose.bias"]


def test_unnamed_308_checkpoint_transfers_to_wholebody_by_name(tiny_pose308_dir):
    labels = list(load_metainfo("coco_wholebody").keypoint_names)
    rows308 = list(load_metainfo("sapiens2_308").keypoint_names)
    model, report = build_task_model("pose", labels, INPUT, pretrained=str(tiny_pose308_dir))
    old_w, old_b = _raw_rows(tiny_pose308_dir)
    shared = [n for n in labels if n in rows308]
    assert report.head == "transferred" and report.transferred == shared and len(shared) == 53
    assert report.new == [n for n in labels if n not in rows308] and len(report.new) == 80
    pred = model.decode_head.predictor
    for i, name in enumerate(labels):
        if name in shared:
            assert torch.equal(pred.weight[i], old_w[rows308.index(name)]), name
            assert torch.equal(pred.bias[i], old_b[rows308.index(name)]), name
    assert "transferred by name (53)" in str(report) and "new (80)" in str(report)


def test_unnamed_308_checkpoint_to_the_308_set_keeps_every_row(tiny_pose308_dir):
    labels = list(load_metainfo("sapiens2_308").keypoint_names)
    model, report = build_task_model("pose", labels, INPUT, pretrained=str(tiny_pose308_dir))
    old_w, old_b = _raw_rows(tiny_pose308_dir)
    assert report.transferred == labels and report.new == []
    assert torch.equal(model.decode_head.predictor.weight, old_w)
    assert torch.equal(model.decode_head.predictor.bias, old_b)
    assert model.config.id2label[62] == "left_wrist"


def test_named_checkpoint_transfers_back_and_custom_sets_mix(tiny_pose308_dir, tmp_path):
    wholebody = list(load_metainfo("coco_wholebody").keypoint_names)
    rows308 = list(load_metainfo("sapiens2_308").keypoint_names)
    model, _ = build_task_model("pose", wholebody, INPUT, pretrained=str(tiny_pose308_dir))
    model.save_pretrained(tmp_path / "wb")  # a fine-tuned 133 model: id2label holds the names
    back, report = build_task_model("pose", rows308, INPUT, pretrained=str(tmp_path / "wb"))
    assert len(report.transferred) == 53 and len(report.new) == 255
    old_w, _ = _raw_rows(tiny_pose308_dir)
    for name in report.transferred:
        assert torch.equal(back.decode_head.predictor.weight[rows308.index(name)], old_w[rows308.index(name)])

    custom = ["neck", "left_heel", "belly_button"]
    mixed, report = build_task_model("pose", custom, INPUT, pretrained=str(tiny_pose308_dir))
    assert report.transferred == ["neck", "left_heel"] and report.new == ["belly_button"]
    assert torch.equal(mixed.decode_head.predictor.weight[0], old_w[rows308.index("neck")])


# -------------------------------------------------------------- per-group AP
def _people_308(path: Path, num_images: int = 3, seed: int = 0) -> list[dict]:
    """A 308-keypoint COCO file: two people per image, every keypoint labelled inside its box."""
    rng = np.random.default_rng(seed)
    names = list(load_metainfo("sapiens2_308").keypoint_names)
    images, anns = [], []
    for img in range(1, num_images + 1):
        images.append({"id": img, "file_name": f"{img:06d}.jpg", "width": 640, "height": 480})
        for p in range(2):
            x0, y0, w, h = 20.0 + 300.0 * p, 30.0, 200.0, 400.0
            xy = np.stack([x0 + w * rng.random(308), y0 + h * rng.random(308)], axis=1)
            kps = np.concatenate([xy, np.full((308, 1), 2.0)], axis=1)
            anns.append({"id": len(anns) + 1, "image_id": img, "category_id": 1, "iscrowd": 0,
                         "bbox": [x0, y0, w, h], "area": w * h, "num_keypoints": 308,
                         "keypoints": kps.reshape(-1).tolist()})
    path.write_text(json.dumps({"images": images, "annotations": anns, "categories": [
        {"id": 1, "name": "person", "keypoints": names, "skeleton": []}]}))
    return anns


def _predict(metric: CocoKeypointAP, anns: list[dict], kpts: np.ndarray) -> dict:
    n = len(anns)
    metric.update(torch.tensor([a["image_id"] for a in anns]), torch.as_tensor(kpts), torch.ones(n, 308),
                  torch.ones(n), torch.tensor([a["area"] for a in anns]))
    return {k: float(v) for k, v in metric.compute().items()}


def test_308_group_ap_oracle_then_wrong_hands(tmp_path):
    meta = load_metainfo("sapiens2_308")
    anns = _people_308(tmp_path / "gt.json")
    truth = np.array([a["keypoints"] for a in anns]).reshape(-1, 308, 3)[..., :2]
    keys = {"AP_body", "AP_foot", "AP_face", "AP_left_hand", "AP_right_hand"}
    res = _predict(CocoKeypointAP(tmp_path / "gt.json", meta.sigmas, groups=meta.group_ids), anns, truth)
    assert keys <= set(res) and all(res[k] == pytest.approx(1.0) for k in keys | {"AP"})

    wrong = truth.copy()
    hands = meta.group_ids["left_hand"] + meta.group_ids["right_hand"]
    wrong[:, hands] += 25.0  # hands 35 px off; everything else exact
    res = _predict(CocoKeypointAP(tmp_path / "gt.json", meta.sigmas, groups=meta.group_ids), anns, wrong)
    for group in ("body", "foot", "face"):
        assert res[f"AP_{group}"] == pytest.approx(1.0), group
    assert res["AP_left_hand"] < 0.05 and res["AP_right_hand"] < 0.05


def test_308_group_ap_equals_slicing_by_name(tmp_path):
    """Each group sliced by its names from the YAML in plain loops, then pycocotools: the same AP."""
    meta = load_metainfo("sapiens2_308")
    anns = _people_308(tmp_path / "gt.json", seed=1)
    rng = np.random.default_rng(2)
    truth = np.array([a["keypoints"] for a in anns]).reshape(-1, 308, 3)[..., :2]
    noisy = truth + rng.normal(0, 6.0, truth.shape)
    metric = CocoKeypointAP(tmp_path / "gt.json", meta.sigmas, groups=meta.group_ids)
    res = _predict(metric, anns, noisy)
    raw = yaml.safe_load((BUILTIN_DIR / "sapiens2_308.yaml").read_text())
    for group, names in raw["groups"].items():
        rows = [raw["keypoints"].index(n) for n in names]
        data = json.loads((tmp_path / "gt.json").read_text())
        for ann in data["annotations"]:
            ann["keypoints"] = [v for r in rows for v in ann["keypoints"][3 * r: 3 * r + 3]]
            ann["num_keypoints"] = len(rows)
        data["categories"][0]["keypoints"] = list(names)
        results = [{**r, "keypoints": [v for row in rows for v in r["keypoints"][3 * row: 3 * row + 3]]}
                   for r in metric.results]
        with contextlib.redirect_stdout(io.StringIO()):
            coco = COCO()
            coco.dataset = data
            coco.createIndex()
            ev = COCOeval(coco, coco.loadRes(results), "keypoints")
            ev.params.kpt_oks_sigmas = np.array([raw["sigmas"][r] for r in rows])
            ev.evaluate()
            ev.accumulate()
            ev.summarize()
        assert res[f"AP_{group}"] == pytest.approx(float(ev.stats[0]), abs=1e-12), group
    assert len({round(res[f"AP_{g}"], 6) for g in raw["groups"]}) > 1  # the groups really differ


# ------------------------------------------------------------------- the recipe
def test_pose_308_recipe_parses(capsys):
    with pytest.raises(SystemExit):
        main(["--config", "pose_308.yaml", "--print_config"])
    config = yaml.safe_load(capsys.readouterr().out)
    assert config["model"]["pretrained"] == "facebook/sapiens2-pose-0.4b"
    assert config["data"]["keypoints"] == "sapiens2_308" and config["data"]["min_keypoints"] == 8
    assert config["model"]["optim"]["lr"] == 5.0e-4 and config["model"]["optim"]["layer_decay"] == 0.8
    assert config["trainer"]["gradient_clip_val"] == 2.0 and config["trainer"]["max_steps"] == 10000


@pytest.fixture(scope="module")
def tiny_308_data(tmp_path_factory) -> Path:
    """The conftest stick figures with 308 keypoints: COCO-17 at their rows, the rest labelled inside the box."""
    root = tmp_path_factory.mktemp("kp308")
    names = list(load_metainfo("sapiens2_308").keypoint_names)
    rows = [names.index(n) for n in COCO17]
    rng = np.random.default_rng(0)
    for split, n, seed in (("train", 4, 0), ("val", 2, 1)):
        ann_file = write_coco(root, split, f"person_keypoints_{split}.json", num_images=n, seed=seed)
        data = json.loads(ann_file.read_text())
        for ann in data["annotations"]:
            x0, y0, w, h = ann["bbox"]
            kps = np.concatenate([np.stack([x0 + w * rng.random(308), y0 + h * rng.random(308)], 1),
                                  np.full((308, 1), 2.0)], 1)
            kps[rows] = np.array(ann["keypoints"]).reshape(17, 3)
            ann["keypoints"], ann["num_keypoints"] = kps.reshape(-1).tolist(), 308
        data["categories"][0]["keypoints"] = names
        ann_file.write_text(json.dumps(data))
    return root


def test_pose_308_recipe_trains_two_steps(tiny_308_data, tiny_pose308_dir, tmp_path):
    summary = main([
        "--config", "pose_308.yaml", "--run_dir", str(tmp_path / "run"),
        "--model.pretrained", str(tiny_pose308_dir), "--data.root", str(tiny_308_data),
        "--data.input_size", "[256, 192]", "--model.sigma", "2", "--data.batch_size", "2",
        "--data.num_workers", "0", "--trainer.max_steps", "2", "--trainer.val_check_interval", "2",
        "--trainer.accelerator", "cpu", "--trainer.devices", "1", "--trainer.enable_progress_bar", "false",
        "--tracking.logger", "csv", "--export", "false",
    ])
    assert summary["global_step"] == 2
    assert "transferred by name (308)" in summary["model"]
    metrics = json.loads((tmp_path / "run" / "summary.json").read_text())["metrics"]
    assert {"AP", "AP_body", "AP_foot", "AP_face", "AP_left_hand", "AP_right_hand"} <= set(metrics)
