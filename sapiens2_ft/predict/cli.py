"""``python -m sapiens2_ft.predict --model DIR_OR_CKPT --input IMAGES --out OUT``.

``--model`` is an exported directory (``<run_dir>/export``), a hub id, or a training checkpoint (exported
to ``OUT/model`` first). The task comes from the model's config.

- pose: one top-down crop per person, flip test, DARK-UDP decode. The people come from ``--boxes`` (a COCO json
  with ``images`` and ``annotations``, or a list of ``{"file_name", "bbox": [x, y, w, h], "score"}``), from
  ``--detector`` (a transformers object-detection model: hub id or directory), from ``--boxes_from_seg`` (a
  Sapiens2 seg model: one box per connected region of its foreground), else the whole image is one person.
  Writes ``OUT/keypoints.json`` (COCO keypoint results), ``OUT/images.json`` (the COCO images and person
  category they refer to, so ``COCO("images.json").loadRes("keypoints.json")`` works) and ``OUT/overlays/NAME.jpg``.
- dense tasks: the whole image resized to the model's input size as in validation (stretched for seg,
  letterboxed otherwise); the outputs are mapped back to the image's pixels and written as in validation
  (``NAME.png`` class ids + ``NAME_overlay.png``; ``NAME.npy`` + ``NAME_normal.png`` / ``NAME_depth.png``;
  ``NAME_alpha.png`` + ``NAME_composite.png``).

Images are keyed by their path relative to ``--input``: ``NAME`` keeps the subfolders (``OUT/sub/NAME.png``)
and so does ``file_name`` in ``images.json``. Unreadable images are skipped with a warning and counted.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from sapiens2_ft.predict.boxes import FileBoxes, add_box_arguments, box_source, read_boxes, whole_image
from sapiens2_ft.predict.dense import predict_dense
from sapiens2_ft.predict.inputs import list_images
from sapiens2_ft.predict.loading import load_module
from sapiens2_ft.predict.pose import predict_pose
from sapiens2_ft.tasks.registry import task_spec


def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(prog="python -m sapiens2_ft.predict", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="exported dir, hub id, .ckpt or distributed checkpoint dir")
    parser.add_argument("--input", required=True, help="an image or a folder of images (searched recursively)")
    parser.add_argument("--out", required=True, help="output folder (created)")
    parser.add_argument("--boxes", default=None, help="pose: person boxes (COCO json or list of detections)")
    add_box_arguments(parser)
    parser.add_argument("--keypoints", default=None, help="pose: keypoint set when the model dir has none")
    parser.add_argument("--mask_model", default=None,
                        help="normal / pointmap: a seg or matting model (same forms as --model) whose people mask the "
                             "normal and depth pictures (the .npy files keep every pixel)")
    parser.add_argument("--batch_size", type=int, default=8, help="images (and person crops) per forward pass")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    images = list_images(Path(args.input))
    module, task = load_module(args.model, out, args.keypoints, args.device)
    if task_spec(task).predictor == "pose":
        if args.boxes and (args.detector or args.boxes_from_seg):
            raise SystemExit("give one of --boxes, --detector and --boxes_from_seg")
        ids, boxes = read_boxes(Path(args.boxes) if args.boxes else None, list(images))
        source = FileBoxes(boxes) if args.boxes else box_source(args, out) or whole_image
        count, skipped = predict_pose(module, images, out, args.batch_size, source, ids)
        done = (f"{count} people in {len(images) - skipped} images -> {out / 'keypoints.json'}, "
                f"overlays in {out / 'overlays'}")
    else:
        if args.boxes or args.detector or args.boxes_from_seg:
            raise SystemExit(f"--boxes, --detector and --boxes_from_seg are for pose models; {args.model} is {task}")
        mask_module = None
        if args.mask_model:
            mask_module, mask_task = load_module(args.mask_model, out / "mask_model", device=args.device)
            if mask_task not in ("seg", "matting"):
                raise SystemExit(f"--mask_model: {args.mask_model} is a {mask_task} model; give a seg or matting one")
        skipped = predict_dense(module, images, out, args.batch_size, mask_module)
        done = f"{task} maps of {len(images) - skipped} images -> {out}"
    print(f"{done}; {skipped} unreadable images skipped")
    if skipped == len(images):
        raise SystemExit(f"--input: none of the {len(images)} images could be read")
    return out
