"""``python -m sapiens2_ft.predict --model DIR_OR_CKPT --input IMAGES --out OUT``.

``--model`` is an exported directory (``<run_dir>/export``), a hub id, or a training checkpoint (exported
to ``OUT/model`` first). The task comes from the model's config.

- pose: one top-down crop per person, flip test, DARK-UDP decode. The people come from ``--boxes`` (a COCO json
  with ``images`` and ``annotations``, or a list of ``{"file_name", "bbox": [x, y, w, h], "score"}``), from
  ``--detector`` (a transformers object-detection model: hub id or directory; the default, with the RT-DETR of
  ``models.detector.DEFAULT_DETECTOR``), from ``--boxes_from_seg`` (a Sapiens2 seg model: one box per connected
  region of its foreground), or with ``--whole_image`` each image is one person (images already cropped).
  Writes ``OUT/keypoints.json`` (COCO keypoint results), ``OUT/images.json`` (the COCO images and person
  category they refer to, so ``COCO("images.json").loadRes("keypoints.json")`` works) and ``OUT/overlays/NAME.jpg``.
- dense tasks: the whole image resized to the model's input size as in validation (stretched for seg,
  letterboxed otherwise); the outputs are mapped back to the image's pixels and written as in validation
  (``NAME.png`` class ids + ``NAME_overlay.png``; ``NAME.npy`` + ``NAME_normal.png`` / ``NAME_depth.png``;
  ``NAME_alpha.png`` + ``NAME_composite.png``; ``NAME.npy`` + ``NAME_albedo.png``).
  ``--focal FX`` (pointmap): the camera's fx in the images' pixels; the metric points use it instead of the focal
  the scale branch guesses.

Several ``--model``s (one per task, e.g. pose + seg + normal + pointmap) each write the above into ``OUT/TASK/``,
and ``OUT/sheets/NAME.jpg`` shows them side by side: keypoints, body-part colours with a legend, normals and
turbo inverse depth on the people the seg (or matting) model finds, the matte.

A video (``--input clip.mp4``, or a folder of frames with ``--video``) gives ``OUT/clip.mp4``, one sheet per frame
at the input's frame rate, and ``OUT/clip.json``: per frame, the people with their track ids, boxes and keypoints.
``--smooth`` One-Euro-filters each track's keypoints, ``--smooth_maps W`` blends the dense maps over the frames.

Images are keyed by their path relative to ``--input``: ``NAME`` keeps the subfolders (``OUT/sub/NAME.png``)
and so does ``file_name`` in ``images.json``. Unreadable images, and those of more than ``--max_pixels`` pixels (read
from the file's header, before decoding), are skipped with a warning and named in the closing summary.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from datamodules.images import MAX_PIXELS, MAX_PIXELS_ENV
from sapiens2_ft.models.detector import DEFAULT_DETECTOR
from sapiens2_ft.predict.boxes import FileBoxes, add_box_arguments, box_source, read_boxes, whole_image
from sapiens2_ft.predict.dense import uses_focal
from sapiens2_ft.predict.inputs import check_out, list_images
from sapiens2_ft.predict.loading import load_module
from sapiens2_ft.predict.run import Model, predict_images
from sapiens2_ft.predict.smoothing import add_smooth_arguments, smooth_options
from sapiens2_ft.predict.video import Frames, is_video, predict_video
from sapiens2_ft.tasks.base import finds_people


def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(prog="python -m sapiens2_ft.predict", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, action="append",
                        help="exported dir, hub id, .ckpt or distributed checkpoint dir; repeat it for several tasks "
                             "(one model per task; each writes into OUT/TASK, plus a sheet per image in OUT/sheets)")
    parser.add_argument("--input", required=True,
                        help="an image, a folder of images (searched recursively), or a video file")
    parser.add_argument("--video", action="store_true",
                        help="read the --input folder as the frames of one video (in name order)")
    parser.add_argument("--fps", type=float, default=None,
                        help="video: frame rate of the output (default: the input video's, 30 for a folder)")
    add_smooth_arguments(parser)
    parser.add_argument("--out", required=True, help="output folder (created)")
    parser.add_argument("--boxes", default=None, help="pose: person boxes (COCO json or list of detections)")
    add_box_arguments(parser)
    parser.add_argument("--whole_image", action="store_true",
                        help=f"pose: each image is one person (images already cropped to a person); without this or "
                             f"another box source, people are found by the person detector ({DEFAULT_DETECTOR})")
    parser.add_argument("--keypoints", default=None, help="pose: keypoint set when the model dir has none")
    parser.add_argument("--mask_model", default=None,
                        help="normal / pointmap: a seg or matting model (same forms as --model) whose people mask the "
                             "normal and depth pictures (the .npy files keep every pixel)")
    parser.add_argument("--focal", type=float, default=None,
                        help="pointmap: the images' focal length fx in their own pixels (a calibrated camera): metric "
                             "points by it instead of the focal the model predicts")
    parser.add_argument("--batch_size", type=int, default=8, help="images (and person crops) per forward pass")
    parser.add_argument("--workers", type=int, default=2,
                        help="threads decoding the next images while the models run (0: decode in line)")
    parser.add_argument("--precision", choices=["auto", "fp32", "bf16"], default="auto",
                        help="bf16 autocast of the models (auto: bf16 on a GPU, fp32 on the CPU)")
    parser.add_argument("--backend", choices=["torch", "onnxruntime"], default="torch",
                        help="onnxruntime: the networks run as ONNX graphs (an export's model.onnx; a checkpoint's is "
                             "exported first), with the same pre- and post-processing; on TensorRT or CUDA where the "
                             "installed onnxruntime has them, else the CPU")
    parser.add_argument("--compile", action="store_true", help="torch.compile each model before its first batch")
    parser.add_argument("--compile_backend", default="inductor", help="--compile: the torch.compile backend")
    parser.add_argument("--max_pixels", type=int, default=None,
                        help=f"skip images of more pixels than this (default {MAX_PIXELS:,}, or {MAX_PIXELS_ENV}); "
                             "the size is read from the file's header before decoding")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args(argv)
    if args.focal is not None and not args.focal > 0:
        raise SystemExit(f"--focal: the focal length in pixels must be > 0, got {args.focal}")
    if args.fps is not None and not args.fps > 0:
        raise SystemExit(f"--fps: frames per second must be > 0, got {args.fps}")
    if args.max_pixels is not None and args.max_pixels <= 0:
        raise SystemExit(f"--max_pixels: give the largest number of pixels an image may have, got {args.max_pixels}")
    out = Path(args.out)
    check_out(out, Path(args.input))
    out.mkdir(parents=True, exist_ok=True)
    video = args.video or is_video(Path(args.input))
    if args.video and not Path(args.input).is_dir():
        raise SystemExit(f"--video: --input must be a folder of frames, got {args.input}")
    if video and args.boxes:
        raise SystemExit("--boxes is for images; for a video give --detector or --boxes_from_seg")
    frames = Frames(Path(args.input), args.fps) if video else None
    images = {} if video else list_images(Path(args.input))
    several = len(args.model) > 1
    models: list[Model] = []
    loaded: dict[str, tuple] = {}
    for k, name in enumerate(args.model):  # a checkpoint among several is exported to OUT/models/K/model
        module, task = load_module(name, out / "models" / str(k) if several else out, args.keypoints, args.device,
                                   args.backend)
        if task in [m.task for m in models]:
            raise SystemExit(f"--model: two {task} models ({name}); give one model per task")
        models.append(Model(module, task, out / task if several else out, args.focal if uses_focal(module) else None))
        loaded[name] = module, task
    if args.focal is not None and all(m.focal is None for m in models):
        raise SystemExit(f"--focal is for pointmap models; {', '.join(m.task for m in models)} do not take a focal")
    pose = [m for m in models if m.is_pose]
    smooth = smooth_options(args, video, bool(pose))
    given = [f"--{name}" for name in ("boxes", "detector", "boxes_from_seg", "whole_image") if getattr(args, name)]
    if given and not pose:
        raise SystemExit(f"{', '.join(given)}: person boxes are for pose models; {args.model[0]} is {models[0].task}")
    if len(given) > 1:
        raise SystemExit(f"{' and '.join(given)}: give one of --boxes, --detector, --boxes_from_seg and --whole_image")
    ids, boxes = read_boxes(Path(args.boxes) if args.boxes else None, list(images))
    if pose and not given:
        args.detector = DEFAULT_DETECTOR
    source = FileBoxes(boxes) if args.boxes else whole_image if args.whole_image else box_source(args, out, loaded)
    mask_model = None
    if args.mask_model:
        mask_module, mask_task = load_module(args.mask_model, out / "mask_model", device=args.device,
                                             backend=args.backend)
        if not finds_people(mask_module):
            raise SystemExit(f"--mask_model: {args.mask_model} is a {mask_task} model, which does not find people; "
                             f"give a segmentation or matting one")
        mask_model = Model(mask_module, mask_task, out / "mask_model")
    if args.backend == "onnxruntime" and (args.compile or args.precision == "bf16"):
        raise SystemExit("--compile and --precision bf16 are for the torch backend; export float16 ONNX for a "
                         "lower precision")
    if args.compile:
        for m in models + ([mask_model] if mask_model else []):
            m.module.model.compile(backend=args.compile_backend)
    device_type = torch.device(args.device).type
    bf16 = args.precision == "bf16" or (args.precision == "auto" and device_type == "cuda" and args.backend == "torch")
    with torch.autocast(device_type, dtype=torch.bfloat16, enabled=bf16):
        if video:
            clip, records = predict_video(models, frames, out, args.batch_size, source, mask_model, smooth)
            print(f"{frames.path.name}: {clip} ({frames.fps:g} frames/s) and per-frame results in {records}")
            return out
        counts, skipped = predict_images(models, images, args.batch_size, source, ids, mask_model,
                                         out / "sheets" if several else None, args.workers, args.max_pixels)
    read = len(images) - len(skipped)
    done = "; ".join(f"{counts[m.task]} people in {read} images -> {m.out / 'keypoints.json'}, overlays in "
                     f"{m.out / 'overlays'}" if m.is_pose else f"{m.task} maps of {counts[m.task]} images -> {m.out}"
                     for m in models)
    if several:
        done += f"; sheets in {out / 'sheets'}"
    names = ", ".join(skipped[:10]) + (f" and {len(skipped) - 10} more" if len(skipped) > 10 else "")
    print(f"{done}; {len(skipped)} images skipped (unreadable or too large){': ' + names if skipped else ''}")
    if len(skipped) == len(images):
        raise SystemExit(f"--input: none of the {len(images)} images could be read")
    return out

