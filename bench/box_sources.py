"""Pose AP on a COCO-layout val split with the people boxed in several ways: ground-truth boxes, a seg model's
foreground regions (``--boxes_from_seg``, with and without ``--seg_split_heads``) and, when given, a person
detector (``--detector``).

Each source goes through ``python -m sapiens2_ft.predict`` with the same pose model; the keypoint results are
scored with pycocotools' OKS AP against the split's annotations. Also printed: how many ground-truth people a
box found (IoU >= 0.5) and how many boxes matched nobody.

Run (the demo models, after ``python train.py --config pose_demo.yaml`` and ``... seg_demo.yaml``):
``python bench/box_sources.py --pose runs/pose_demo/STAMP/export --seg runs/seg_demo/STAMP/export``
(``--root data/synthetic``, ``--ann annotations/val.json``, ``--images val/images`` by default).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
from pathlib import Path


sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sapiens2_ft import predict  # noqa: E402
from sapiens2_ft.models.detector import box_iou, xywh_to_xyxy  # noqa: E402


def score(gt_file: Path, out: Path) -> dict:
    """OKS AP / AP50 of ``out``'s results against ``gt_file`` (image ids mapped by file name), and box recall."""
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    with contextlib.redirect_stdout(io.StringIO()):
        gt = COCO(str(gt_file))
    ids = {im["file_name"]: im["id"] for im in gt.dataset["images"]}
    ours = {im["id"]: ids[im["file_name"]] for im in json.loads((out / "images.json").read_text())["images"]}
    results = json.loads((out / "keypoints.json").read_text())
    for r in results:
        r["image_id"] = ours[r["image_id"]]
    hits = people = stray = 0
    for image_id in gt.getImgIds():
        truth = [a["bbox"] for a in gt.loadAnns(gt.getAnnIds(imgIds=image_id, iscrowd=False)) if a["num_keypoints"]]
        boxes = [r["bbox"] for r in results if r["image_id"] == image_id]
        people += len(truth)
        if truth and boxes:
            iou = box_iou(xywh_to_xyxy(truth), xywh_to_xyxy(boxes))
            hits += int((iou.max(1).values >= 0.5).sum())
            stray += int((iou.max(0).values < 0.5).sum())
        else:
            stray += len(boxes)
    with contextlib.redirect_stdout(io.StringIO()):
        evaluation = COCOeval(gt, gt.loadRes(results), "keypoints")
        evaluation.evaluate()
        evaluation.accumulate()
        evaluation.summarize()
    return {"AP": evaluation.stats[0], "AP50": evaluation.stats[1], "found": hits, "people": people,
            "boxes": len(results), "stray": stray}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pose", required=True)
    parser.add_argument("--seg", required=True)
    parser.add_argument("--detector", default=None)
    parser.add_argument("--root", default="data/synthetic")
    parser.add_argument("--ann", default="annotations/val.json")
    parser.add_argument("--images", default="val/images")
    parser.add_argument("--out", default="bench/out/box_sources")
    args = parser.parse_args()
    root, out = Path(args.root), Path(args.out)
    common = ["--model", args.pose, "--input", str(root / args.images)]
    sources = {"ground-truth boxes": ["--boxes", str(root / args.ann)],
               "--boxes_from_seg": ["--boxes_from_seg", args.seg],
               "--boxes_from_seg --no-seg_split_heads": ["--boxes_from_seg", args.seg, "--no-seg_split_heads"]}
    if args.detector:
        sources["--detector"] = ["--detector", args.detector]
    rows = {}
    for name, extra in sources.items():
        with contextlib.redirect_stderr(io.StringIO()):
            done = predict.main([*common, *extra, "--out", str(out / name.replace("-", "").replace(" ", "_"))])
        rows[name] = score(root / args.ann, done)
    print("| boxes | OKS AP | AP50 | people found (IoU >= 0.5) | boxes on nobody |")
    print("|---|---|---|---|---|")
    for name, r in rows.items():
        print(f"| {name} | {r['AP']:.3f} | {r['AP50']:.3f} | {r['found']} of {r['people']} | "
              f"{r['stray']} of {r['boxes']} |")


if __name__ == "__main__":
    main()
