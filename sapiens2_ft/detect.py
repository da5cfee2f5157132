"""``python -m sapiens2_ft.detect --config X [--detector [ID] | --boxes_from_seg MODEL] [--out FILE]``: person
boxes for every image of the configured pose validation split, written as a COCO detections json.

Validating with ``--data.val_detections FILE`` (relative to ``data.root``) then crops these boxes instead of the
ground truth's, as the COCO keypoint protocol does with a detector's boxes. Takes the config files and
``--data.*`` overrides of ``train.py`` besides its own options; prints how many ground-truth people a box
found (IoU >= 0.5). The default ``--out`` is ``DATA_ROOT/val_detections.json``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from datamodules.boundary.files import read_json
from datamodules.boundary.folders import inside
from datamodules.boundary.writes import write_json
from sapiens2_ft.check_data import DataCheckCLI
from sapiens2_ft.exits import console_command
from sapiens2_ft.models.detector import DEFAULT_DETECTOR, box_iou, xywh_to_xyxy
from sapiens2_ft.predict.boxes import add_box_arguments, box_argument_problems, box_source
from sapiens2_ft.predict.inputs import read_chunk
from sapiens2_ft.problems import Problems
from sapiens2_ft.tasks.registry import takes_person_boxes
from sapiens2_ft.training.cli import resolve_config_args, task_of


def recall(found: dict[int, np.ndarray], truth: dict[int, list], iou: float = 0.5) -> tuple[int, int]:
    """(ground-truth people with a box of IoU >= ``iou``, ground-truth people)."""
    hits = total = 0
    for image_id, people in truth.items():
        total += len(people)
        boxes = found.get(image_id)
        if people and boxes is not None and len(boxes):
            hits += int((box_iou(xywh_to_xyxy(people), xywh_to_xyxy(boxes[:, :4])).max(1).values >= iou).sum())
    return hits, total


@console_command
def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(prog="python -m sapiens2_ft.detect", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=None, help="the detections json (default: DATA_ROOT/val_detections.json)")
    add_box_arguments(parser)
    parser.add_argument("--batch_size", type=int, default=8, help="images per forward pass")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args, rest = parser.parse_known_args(sys.argv[1:] if argv is None else argv)
    rest = resolve_config_args(rest)
    task = task_of(rest)
    problems = Problems(box_argument_problems(args))
    problems.check(args.batch_size >= 1, f"--batch_size: give at least 1 image per forward pass, got {args.batch_size}")
    problems.check(not (args.detector and args.boxes_from_seg), "give one of --detector and --boxes_from_seg")
    problems.check(takes_person_boxes(task), f"--config: detect is for the configs of a task that crops people (pose); this "
                                   f"one is task {task}")
    problems.raise_any()
    cli = DataCheckCLI(task, args=rest, run=False, seed_everything_default=0, auto_configure_optimizers=False)
    data = cli.datamodule
    data.prepare_data()
    ann_file, images_dir = data.val_annotation_file, data.root / data.hparams.val_images
    coco = read_json(ann_file)
    if not args.detector and not args.boxes_from_seg:
        args.detector = DEFAULT_DETECTOR
    out = Path(args.out) if args.out else data.root / "val_detections.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    source = box_source(args, out.parent)
    items = [(im["id"], path) for im in coco["images"] if (path := inside(images_dir, images_dir / im["file_name"]))]
    found: dict[int, np.ndarray] = {}
    for start in tqdm(range(0, len(items), args.batch_size), desc="detect", unit="batch"):
        chunk = items[start:start + args.batch_size]
        path_ids = {str(path): image_id for image_id, path in chunk}
        keys, images, _ = read_chunk([(str(path), path) for _, path in chunk])
        for key, boxes in zip(keys, source(keys, images)):
            found[path_ids[key]] = boxes
    detections = [{"image_id": image_id, "category_id": 1, "bbox": [round(float(v), 2) for v in box[:4]],
                   "score": round(float(box[4]), 4)} for image_id, boxes in found.items() for box in boxes]
    write_json(out.parent, out.name, detections)
    truth: dict[int, list] = {im["id"]: [] for im in coco["images"]}
    for ann in coco.get("annotations", []):
        if not ann.get("iscrowd", 0) and ann.get("num_keypoints", 1) > 0:
            truth.setdefault(ann["image_id"], []).append(ann["bbox"])
    hits, total = recall(found, truth)
    unread = len(items) - len(found)
    print(f"{len(detections)} person boxes in {len(found)} images -> {out} ({unread} unreadable images skipped); "
          f"{hits} of {total} ground-truth people found at IoU >= 0.5")
    print(f"validate with them: --data.val_detections {out.resolve()}")
    return out


if __name__ == "__main__":
    main()
