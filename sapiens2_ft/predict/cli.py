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
  ``NAME_alpha.png`` + ``NAME_composite.png``; ``NAME.npy`` + ``NAME_albedo.png``); a pointmap also ``NAME.ply``,
  its points coloured by the image (the people only, where a seg or matting model runs beside it), in metres, with
  the intrinsics used in the header and in ``NAME_intrinsics.txt``.
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

from datamodules.boundary.limits import MAX_PIXELS, MAX_PIXELS_ENV
from datamodules.errors import BadInput, Refused
from sapiens2_ft.exits import console_command
from sapiens2_ft.models.detector import DEFAULT_DETECTOR
from sapiens2_ft.predict.boxes import (FileBoxes, add_box_arguments, box_argument_problems, box_source, read_boxes,
                                       whole_image)
from sapiens2_ft.predict.inputs import check_out, list_images
from sapiens2_ft.predict.loading import load_inference, model_problem
from sapiens2_ft.predict.options import PRECISIONS, model_problems, option_problems, uses_bf16
from sapiens2_ft.predict.run import Model, predict_images
from sapiens2_ft.predict.smoothing import add_smooth_arguments, smooth_options
from sapiens2_ft.predict.video import Frames, is_video, predict_video
from sapiens2_ft.labelling import formats as labelling
from sapiens2_ft.problems import Problems

BOX_SOURCES = ("boxes", "detector", "boxes_from_seg", "whole_image")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m sapiens2_ft.predict", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, action="append",
                   help="exported dir, hub id, .ckpt or distributed checkpoint dir; repeat it for several tasks "
                        "(one model per task; each writes into OUT/TASK, plus a sheet per image in OUT/sheets)")
    p.add_argument("--input", required=True, help="an image, a folder of images (searched recursively), or a video file")
    p.add_argument("--video", action="store_true", help="read the --input folder as the frames of one video (in name order)")
    p.add_argument("--fps", type=float, default=None,
                   help="video: frame rate of the output (default: the input video's, 30 for a folder)")
    add_smooth_arguments(p)
    p.add_argument("--out", required=True, help="output folder (created)")
    p.add_argument("--boxes", default=None, help="pose: person boxes (COCO json or list of detections)")
    add_box_arguments(p)
    p.add_argument("--whole_image", action="store_true",
                   help=f"pose: each image is one person (images already cropped to a person); without this or "
                        f"another box source, people are found by the person detector ({DEFAULT_DETECTOR})")
    p.add_argument("--keypoints", default=None, help="pose: keypoint set when the model dir has none")
    p.add_argument("--mask_model", default=None,
                   help="normal / pointmap: a seg or matting model (same forms as --model) whose people mask the "
                        "normal and depth pictures and the point clouds (the .npy files keep every pixel)")
    p.add_argument("--focal", type=float, default=None,
                   help="pointmap: the images' focal length fx in their own pixels (a calibrated camera): metric "
                        "points by it instead of the focal the model predicts")
    p.add_argument("--batch_size", type=int, default=8, help="images (and person crops) per forward pass")
    p.add_argument("--workers", type=int, default=2,
                   help="threads decoding the next images while the models run (0: decode in line)")
    p.add_argument("--precision", choices=PRECISIONS, default="auto",
                   help="bf16 autocast of the models (auto: bf16 on a GPU, fp32 on the CPU)")
    p.add_argument("--backend", choices=["torch", "onnxruntime"], default="torch",
                   help="onnxruntime: the networks run as ONNX graphs (an export's model.onnx; a checkpoint's is "
                        "exported first), with the same pre- and post-processing; on TensorRT or CUDA where the "
                        "installed onnxruntime has them, else the CPU")
    p.add_argument("--compile", action="store_true", help="torch.compile each model before its first batch")
    p.add_argument("--compile_backend", default="inductor", help="--compile: the torch.compile backend")
    p.add_argument("--max_pixels", type=int, default=None,
                   help=f"skip images of more pixels than this (default {MAX_PIXELS:,}, or {MAX_PIXELS_ENV}); "
                        "the size is read from the file's header before decoding")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    labelling.add_format_arguments(p)
    return p


def argument_problems(args) -> Problems:
    """Every problem of the arguments seen before a model is loaded, each naming its argument."""
    problems = Problems(filter(None, [model_problem(m) for m in args.model]))
    source = Path(args.input)
    try:
        check_out(Path(args.out), source)
    except Refused as err:
        problems.append(str(err))
    if problems.check(source.exists(), f"--input: '{args.input}' does not exist (an image, a folder of images or a "
                                       f"video file)"):
        problems.check(not args.video or source.is_dir(), f"--video: --input must be a folder of frames, "
                                                          f"got {args.input}")
        problems.check(not (args.boxes and (args.video or is_video(source))),
                       "--boxes is for images; for a video give --detector or --boxes_from_seg")
    if args.mask_model:
        problems.check(model_problem(args.mask_model) is None, str(model_problem(args.mask_model)))
    problems.check(not args.boxes or Path(args.boxes).is_file(), f"--boxes: '{args.boxes}' is not a file")
    given = [f"--{name}" for name in BOX_SOURCES if getattr(args, name)]
    problems.check(len(given) <= 1, f"{' and '.join(given)}: give one of --boxes, --detector, --boxes_from_seg and "
                                    f"--whole_image")
    problems += box_argument_problems(args)
    problems += option_problems("--", args.batch_size, args.focal, args.fps, args.precision)
    problems += labelling.format_problems(args)
    problems.check(args.max_pixels is None or args.max_pixels > 0,
                   f"--max_pixels: give the largest number of pixels an image may have, got {args.max_pixels}")
    problems.check(args.workers >= 0, f"--workers: give 0 or more decoding threads, got {args.workers}")
    problems.check(args.backend != "onnxruntime" or not (args.compile or args.precision == "bf16"),
                   "--compile and --precision bf16 are for the torch backend; export float16 ONNX for a lower "
                   "precision")
    return problems


def load_models(args, out: Path) -> tuple[list[Model], dict, Model | None]:
    """The ``--model`` inference objects (one per task; a checkpoint among several is exported to
    ``OUT/models/K/model``), those by the name given, and the ``--mask_model``'s; then every problem of the
    arguments with the tasks they turned out to be."""
    several = len(args.model) > 1
    models: list[Model] = []
    loaded: dict[str, tuple] = {}
    problems = Problems()
    for k, name in enumerate(args.model):
        inference, task = load_inference(name, out / "models" / str(k) if several else out, args.keypoints,
                                         args.device, args.backend)
        problems.check(task not in [m.task for m in models], f"--model: two {task} models ({name}); give one model "
                                                             f"per task")
        models.append(Model(inference, task, out / task if several else out,
                            args.focal if inference.takes_focal else None))
        loaded[name] = inference, task
    given = [f"--{name}" for name in BOX_SOURCES if getattr(args, name)]
    problems += model_problems("--", [m.inference for m in models], args.focal, given, args.model[0])
    mask_model = None
    if args.mask_model:
        inference, task = load_inference(args.mask_model, out / "mask_model", device=args.device, backend=args.backend)
        problems.check(inference.finds_people, f"--mask_model: {args.mask_model} is a {task} model, which does not "
                                               f"find people; give a segmentation or matting one")
        mask_model = Model(inference, task, out / "mask_model")
    problems.raise_any()
    return models, loaded, mask_model


@console_command
def main(argv: list[str] | None = None) -> Path:
    args = parser().parse_args(argv)
    argument_problems(args).raise_any()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    video = args.video or is_video(Path(args.input))
    frames = Frames(Path(args.input), args.fps) if video else None
    images = {} if video else list_images(Path(args.input))
    models, loaded, mask_model = load_models(args, out)
    smooth = smooth_options(args, video, any(m.inference.takes_person_boxes for m in models))
    ids, boxes = read_boxes(Path(args.boxes) if args.boxes else None, list(images))
    if any(m.inference.takes_person_boxes for m in models) and not any(getattr(args, n) for n in BOX_SOURCES):
        args.detector, args.detector_by_default = DEFAULT_DETECTOR, True
    source = FileBoxes(boxes) if args.boxes else whole_image if args.whole_image else box_source(args, out, loaded)
    if args.compile:
        for m in models + ([mask_model] if mask_model else []):
            m.inference.model.compile(backend=args.compile_backend)
    device_type = torch.device(args.device).type
    bf16 = uses_bf16(args.precision, args.device, args.backend)
    several = len(models) > 1
    with torch.autocast(device_type, dtype=torch.bfloat16, enabled=bf16):
        if video:
            clip, records = predict_video(models, frames, out, args.batch_size, source, mask_model, smooth)
            print(f"{frames.path.name}: {clip} ({frames.fps:g} frames/s) and per-frame results in {records}")
            return out
        if args.format != labelling.FILES:  # pre-annotations for a labelling tool (sapiens2_ft/labelling)
            return labelling.write_format(args, models, images, source)  # a LabellingError: exit 1, its message
        counts, skipped = predict_images(models, images, args.batch_size, source, ids, mask_model,
                                         out / "sheets" if several else None, args.workers, args.max_pixels)
    read = len(images) - len(skipped)
    done = "; ".join(m.inference.writer(m.out).summary(counts[m.task], read) for m in models)
    if several:
        done += f"; sheets in {out / 'sheets'}"
    names = ", ".join(skipped[:10]) + (f" and {len(skipped) - 10} more" if len(skipped) > 10 else "")
    print(f"{done}; {len(skipped)} images skipped (unreadable or too large){': ' + names if skipped else ''}")
    if len(skipped) == len(images):
        raise BadInput(f"--input: none of the {len(images)} images could be read")
    return out
