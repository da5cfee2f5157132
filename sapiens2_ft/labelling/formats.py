"""``predict --format labelstudio | cvat | labelme | coco``: the pre-annotations each labelling tool imports, in place
of predict's own files. One writer per tool and kind of label (``FORMATS``); with several ``--model`` s each
writes into ``OUT/TASK/``, as predict does.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote

from tqdm import tqdm

from datamodules.boundary.folders import inside
from sapiens2_ft.labelling.coco import CocoFiles
from sapiens2_ft.labelling.cvat import CvatMasks, CvatPose
from sapiens2_ft.labelling.label_studio import LOCAL_FILES, LabelStudioTasks
from sapiens2_ft.labelling.labelme import LabelMeFiles
from sapiens2_ft.labelling.predictions import LabellingError, LabelSet, label_kind, predict_images

if TYPE_CHECKING:  # predict imports this module for its --format
    from sapiens2_ft.predict.boxes import BoxSource
    from sapiens2_ft.predict.run import Model

FILES = "files"  # predict's own outputs (keypoints.json, label PNGs, ...)
FORMATS = {  # format -> label kind -> writer class
    "labelstudio": {"keypoint": LabelStudioTasks, "class": LabelStudioTasks},
    "cvat": {"keypoint": CvatPose, "class": CvatMasks},
    "labelme": {"keypoint": LabelMeFiles, "class": LabelMeFiles},
    "coco": {"keypoint": CocoFiles, "class": CocoFiles},
}


@dataclass(frozen=True)
class FormatOptions:
    """How the pre-annotations are written.

    Args:
        format: A key of ``FORMATS``.
        image_url: Label Studio: the prefix of its image URLs (the image's key is appended).
        min_score: Keypoints scored below this are left out (CVAT: ``outside``; COCO: v 0).
        model_version: The model's name in the files (default: ``model_version`` of ``--model``).
    """

    format: str
    image_url: str = LOCAL_FILES
    min_score: float = 0.0
    model_version: str | None = None


def model_version(model: str) -> str:
    """The model as the files name it: a hub id as given, a local folder by its name (``RUN/export``: the run's
    folder name and ``export``)."""
    path = Path(model)
    if not path.exists():
        return model
    path = path.resolve()
    return f"{path.parent.name}/{path.name}" if path.name == "export" else path.name


def writer_for(options: FormatOptions, out: Path, labels: LabelSet):
    writer = FORMATS[options.format][labels.kind]
    if writer is LabelStudioTasks:
        return LabelStudioTasks(out, labels, options.image_url, options.min_score)
    return writer(out, labels, min_score=options.min_score)


def add_format_arguments(parser: argparse.ArgumentParser, default: str = FILES) -> None:
    """``--format`` and its options (predict: ``default`` files, its own outputs; select: none)."""
    plain = "predict's own outputs" if default == FILES else "none"
    parser.add_argument("--format", choices=[default, *FORMATS], default=default,
                        help=f"{default}: {plain}; labelstudio | cvat | labelme | coco: pre-annotations the tool "
                             "imports, with the model's scores and version (docs/labelling.md)")
    parser.add_argument("--image_url", default=None,
                        help="--format labelstudio: prefix of the tasks' image URLs, the image's path relative to "
                             f"--input appended (default {LOCAL_FILES}INPUT/, INPUT the --input folder's name: Label "
                             "Studio's local files, its document root the folder that holds --input)")
    parser.add_argument("--min_score", type=float, default=0.0,
                        help="pre-annotations: leave out keypoints scored below this (default 0: all)")
    parser.add_argument("--model_version", default=None,
                        help="pre-annotations: the model's name in the files (default: the --model folder's name)")


def format_problems(args) -> list[str]:
    """The problems of the format arguments, each naming its argument."""
    problems = []
    if not 0 <= args.min_score <= 1:
        problems.append(f"--min_score: a keypoint score in [0, 1], got {args.min_score}")
    if args.format != FILES and getattr(args, "video", False):
        problems.append(f"--format {args.format}: pre-annotations are for images; a video's frames go into a folder")
    return problems


def default_image_url(images: Path) -> str:
    """Label Studio's local-files URL prefix of the images in folder ``images``, its document root the folder that
    holds it (Label Studio serves a storage in a sub-folder of its document root, never the root itself); one image:
    its folder's."""
    folder = Path(images).resolve()
    return f"{LOCAL_FILES}{quote((folder if folder.is_dir() else folder.parent).name)}/"


def options_of(args) -> FormatOptions:
    url = args.image_url if args.image_url is not None else default_image_url(Path(args.input))
    return FormatOptions(args.format, url, args.min_score, args.model_version)


def inside_input(images: dict[str, Path], root: Path) -> dict[str, Path]:
    """The images that lie inside the ``--input`` folder once links are followed; the others (a link leading out of
    it) are skipped with a warning: their copies and names would carry a file from elsewhere into the tool."""
    if not root.is_dir():
        return images
    kept = {key: path for key, path in images.items() if inside(root, path, follow_links=True)}
    for key in images.keys() - kept.keys():
        tqdm.write(f"warning: skipped: {images[key]} is a link leading out of {root}", file=sys.stderr)
    return kept


def preannotate(models: list[Model], names: list[str], images: dict[str, Path], source: BoxSource,
                options: FormatOptions, batch_size: int = 8, workers: int = 2, max_pixels: int | None = None
                ) -> tuple[list[str], list[str]]:
    """Runs every model on the images and writes each one's pre-annotations in ``options.format`` into its
    ``Model.out``; returns (one summary line per model, the keys of the images skipped). ``names``: each model's
    ``--model``, for its version."""
    for m in models:
        label_kind(m.task)  # a LabellingError before anything runs
    writers = {m.task: writer_for(options, m.out, LabelSet.of(m.inference, options.model_version
                                                              or model_version(name)))
               for m, name in zip(models, names)}
    skipped: list[str] = []
    progress = tqdm(total=len(images), desc="pre-annotate", unit="image")
    for found in predict_images(models, images, source, batch_size, workers, max_pixels, skipped):
        for task, predictions in found.items():
            for prediction in predictions:
                writers[task].add(prediction)
        progress.update(len(next(iter(found.values()))))
    progress.close()
    return [w.close() for w in writers.values()], skipped


__all__ = ["FILES", "FORMATS", "FormatOptions", "LabellingError", "add_format_arguments", "format_problems",
           "preannotate"]


def write_format(args, models: list[Model], images: dict[str, Path], source: BoxSource) -> Path:
    """``predict --format``: the pre-annotations of every model (``preannotate``), its summary printed; a
    ``LabellingError`` when no image could be read."""
    lines, skipped = preannotate(models, args.model, inside_input(images, Path(args.input)), source, options_of(args),
                                 args.batch_size, args.workers, args.max_pixels)
    names = ", ".join(skipped[:10]) + (f" and {len(skipped) - 10} more" if len(skipped) > 10 else "")
    note = f": {names}" if skipped else ""
    print("; ".join(lines) + f"; {len(skipped)} images skipped (unreadable or too large){note}")
    if images and len(skipped) == len(images):
        raise LabellingError(f"--input: none of the {len(images)} images could be read")
    return Path(args.out)
