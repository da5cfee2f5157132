"""The files the documented commands expect, made small: a user's LabelMe export with 21 keypoints (COCO-17 and
four foot points), the same people as a CVAT "Segmentation mask 1.1" export, photos, a clip, and the released models
(tiny stand-ins saved as the Hub holds them) in a Hugging Face cache under their ids."""

from __future__ import annotations

import json
from pathlib import Path

import cv2
import numpy as np
from conftest import COCO17, TEMPLATE, tiny_pose_config
from hub_cache import write_hub_cache

from datamodules.body_parts import SAPIENS2_PART_CLASSES

FEET = ["left_heel", "right_heel", "left_big_toe", "right_big_toe"]
FOOT_OFFSETS = np.array([[-0.03, 0.03], [0.03, 0.03], [0.04, 0.05], [-0.04, 0.05]])  # from the ankles, box units
SIZE = (240, 180)  # photo (H, W)
PARTS = {"Torso": ((5, 6, 12, 11), 22), "Left_Upper_Leg": ((11, 13), 12), "Right_Upper_Leg": ((12, 14), 21),
         "Face_Neck": ((0,), 3)}  # label: (COCO keypoints whose hull or thick line paints it, class id)
RELEASED_SIZE = {"height": 1024, "width": 768}


def person(rng, h: int, w: int) -> tuple[np.ndarray, list[float]]:
    """A standing figure's 21 keypoints (x, y) and its box [x, y, w, h] somewhere in an h x w image."""
    bw, bh = rng.uniform(0.3, 0.42) * w, rng.uniform(0.6, 0.85) * h
    x0, y0 = rng.uniform(2, w - bw - 2), rng.uniform(2, h - bh - 2)
    body = TEMPLATE * [bw, bh] + [x0, y0] + rng.normal(0, 1.0, TEMPLATE.shape)
    ankles = body[[15, 16, 15, 16]]
    feet = ankles + FOOT_OFFSETS * [bw, bh]
    return np.concatenate([body, feet]), [float(x0), float(y0), float(bw), float(bh)]


def draw(image: np.ndarray, labels: np.ndarray, points: np.ndarray) -> None:
    """The figure's limbs into the image and its body parts into the label map."""
    links = [(5, 7), (7, 9), (6, 8), (8, 10), (11, 13), (13, 15), (12, 14), (14, 16), (5, 6), (11, 12), (5, 11),
             (6, 12), (0, 5), (0, 6), (15, 17), (15, 19), (16, 18), (16, 20)]
    for a, b in links:
        cv2.line(image, tuple(int(v) for v in points[a]), tuple(int(v) for v in points[b]), (230, 200, 90), 3)
    for (ids, class_id) in PARTS.values():
        pts = points[list(ids)].astype(np.int32)
        if len(ids) > 2:
            cv2.fillConvexPoly(labels, cv2.convexHull(pts), class_id)
        elif len(ids) == 2:
            cv2.line(labels, tuple(pts[0]), tuple(pts[1]), class_id, 7)
        else:
            cv2.circle(labels, tuple(pts[0]), 7, class_id, -1)


def labelled_images(count: int, seed: int = 0):
    """(RGB image, label map, [(21 keypoints, box)]) of ``count`` photos with one or two people."""
    rng = np.random.default_rng(seed)
    h, w = SIZE
    for _ in range(count):
        image = rng.integers(20, 90, size=(h, w, 3), dtype=np.uint8)
        labels = np.zeros((h, w), np.uint8)
        people = [person(rng, h, w) for _ in range(int(rng.integers(1, 3)))]
        for points, _ in people:
            draw(image, labels, points)
        yield image, labels, people


def write_labelme_export(src: Path, count: int = 10) -> Path:
    """LabelMe JSON per image: a rectangle and 21 named points per person, tied by ``group_id``."""
    src.mkdir(parents=True, exist_ok=True)
    for i, (image, _, people) in enumerate(labelled_images(count)):
        cv2.imwrite(str(src / f"photo{i}.jpg"), cv2.cvtColor(image, cv2.COLOR_RGB2BGR))
        shapes = []
        for g, (points, (x, y, bw, bh)) in enumerate(people, 1):
            shapes.append({"label": "person", "points": [[x, y], [x + bw, y + bh]], "group_id": g,
                           "shape_type": "rectangle", "flags": {}})
            shapes += [{"label": name.replace("_", " ").title(), "points": [[float(px), float(py)]], "group_id": g,
                        "shape_type": "point", "flags": {}} for name, (px, py) in zip(COCO17 + FEET, points)]
            torso = cv2.convexHull(points[[5, 6, 12, 11]].astype(np.float32)).reshape(-1, 2)
            shapes.append({"label": "Torso", "points": torso.tolist(), "group_id": g, "shape_type": "polygon",
                           "flags": {}})
        (src / f"photo{i}.json").write_text(json.dumps({
            "version": "5.4.1", "flags": {}, "shapes": shapes, "imagePath": f"photo{i}.jpg", "imageData": None,
            "imageHeight": SIZE[0], "imageWidth": SIZE[1]}))
    return src


def write_yolo_export(src: Path, count: int = 6) -> Path:
    """Ultralytics YOLO-pose: data.yaml, images/{train,val}, labels/{train,val} rows of the COCO-17 keypoints."""
    import yaml

    from datamodules.keypoints.metainfo import load_metainfo

    h, w = SIZE
    for i, (image, _, people) in enumerate(labelled_images(count, seed=4)):
        split = "val" if i % 3 == 0 else "train"
        (src / "images" / split).mkdir(parents=True, exist_ok=True)
        (src / "labels" / split).mkdir(parents=True, exist_ok=True)
        cv2.imwrite(str(src / "images" / split / f"im{i}.jpg"), cv2.cvtColor(image, cv2.COLOR_RGB2BGR))
        rows = []
        for points, (x, y, bw, bh) in people:
            values = [(x + bw / 2) / w, (y + bh / 2) / h, bw / w, bh / h]
            for px, py in points[:17]:
                values += [px / w, py / h, 2]
            rows.append("0 " + " ".join(f"{v:.6f}" for v in values))
        (src / "labels" / split / f"im{i}.txt").write_text("\n".join(rows) + "\n")
    (src / "data.yaml").write_text(yaml.safe_dump({"path": ".", "train": "images/train", "val": "images/val",
                                                   "kpt_shape": [17, 3], "names": {0: "person"},
                                                   "flip_idx": list(load_metainfo("coco17").flip_indices)}))
    return src


def write_cvat_mask_export(src: Path, count: int = 10) -> Path:
    """CVAT "Segmentation mask 1.1": labelmap.txt, the image list, colour masks and the images."""
    colours = {name: ((37 * k) % 256, (91 * k) % 256, (151 * k) % 256) for k, name in enumerate(SAPIENS2_PART_CLASSES)}
    (src / "ImageSets" / "Segmentation").mkdir(parents=True, exist_ok=True)
    (src / "SegmentationClass").mkdir(exist_ok=True)
    (src / "JPEGImages").mkdir(exist_ok=True)
    (src / "labelmap.txt").write_text("# label:color_rgb:parts:actions\n" + "".join(
        f"{name.lower()}:{','.join(map(str, colour))}::\n" for name, colour in colours.items()))
    table = np.array([colours[name] for name in SAPIENS2_PART_CLASSES], np.uint8)
    stems = []
    for i, (image, labels, _) in enumerate(labelled_images(count, seed=1)):
        stems.append(f"frame_{i:04d}")
        cv2.imwrite(str(src / "JPEGImages" / f"{stems[-1]}.jpg"), cv2.cvtColor(image, cv2.COLOR_RGB2BGR))
        cv2.imwrite(str(src / "SegmentationClass" / f"{stems[-1]}.png"), cv2.cvtColor(table[labels], cv2.COLOR_RGB2BGR))
    (src / "ImageSets" / "Segmentation" / "default.txt").write_text("\n".join(stems) + "\n")
    return src


def write_photos(folder: Path, count: int = 2) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for i, (image, _, _) in enumerate(labelled_images(count, seed=2)):
        cv2.imwrite(str(folder / f"IMG_{i:04d}.jpg"), cv2.cvtColor(image, cv2.COLOR_RGB2BGR))
    return folder


def write_clip(path: Path, frames: int = 4) -> Path:
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), 10.0, (SIZE[1], SIZE[0]))
    for image, _, _ in labelled_images(frames, seed=3):
        writer.write(cv2.cvtColor(image, cv2.COLOR_RGB2BGR))
    writer.release()
    return path


def released_models(root: Path, detector: Path) -> Path:
    """A hub cache holding a tiny stand-in for each released task model used in the docs (saved with
    ``save_pretrained`` and a ``preprocessor_config.json`` of the released size, as the Hub repos hold them) and the
    default person detector."""
    import transformers

    from sapiens2_ft.models.detector import DEFAULT_DETECTOR
    from sapiens2_ft.tasks.registry import TASKS

    models = {DEFAULT_DETECTOR: detector}
    for task, repo, labels in (("pose", "facebook/sapiens2-pose-0.4b", 308), ("seg", "facebook/sapiens2-seg-0.4b", 29),
                               ("normal", "facebook/sapiens2-normal-0.4b", 3),
                               ("pointmap", "facebook/sapiens2-pointmap-0.4b", 3),
                               ("matting", "facebook/sapiens2-matting-1b", 4)):
        config = tiny_pose_config(labels)
        config.image_size = [RELEASED_SIZE["height"], RELEASED_SIZE["width"]]
        if task != "pose":
            from sapiens2_ft.tasks import heads

            layout = {"seg": heads.SEG_HEADS, "pointmap": heads.POINTMAP_HEADS}.get(task, heads.PIXEL_SHUFFLE_HEADS)
            config.head_config = transformers.Sapiens2HeadConfig(**tiny_head(layout["0.4b"]))
            config.head_config._init_scale_final_input_size(config.image_size, config.patch_size)
        model = getattr(transformers, TASKS[task].model.model_class)(config)
        out = root / "models" / repo.split("/")[1]
        model.save_pretrained(out)
        (out / "preprocessor_config.json").write_text(json.dumps({
            "image_processor_type": "Sapiens2ImageProcessor", "size": RELEASED_SIZE, "do_normalize": True}))
        models[repo] = out
    return write_hub_cache(root / "hub", models)


def tiny_head(layout: dict) -> dict:
    """A released head layout with every channel count cut to 8 (the same shape of layers, a tiny model)."""
    return {key: [8] * len(value) if isinstance(value, (list, tuple)) and value and isinstance(value[0], int)
            and key.endswith("channels") else value for key, value in layout.items()}
