"""``python -m sapiens2_ft.pseudo_labels --model M --input PHOTOS --out DIR``: a model's predictions on images nobody
labelled, filtered by score, written as a data set the recipes read (docs/distill.md).

The predictions are predict's (``predict.run.infer_chunk``: the same boxes, crops and maps); they are written by
convert's writer (``convert.output.write_dataset``: the layouts of docs/convert.md, a val split by
``--val_fraction``, nothing overwritten or written through a link, then the data modules' own check). What each task
writes is what its inference class declares (``pseudo_labels``):

- ``keypoints`` (pose): ``annotations/{split}.json`` (COCO keypoints) and ``{split}/images/``: each person whose
  instance score is at least ``--min_score``, its keypoints scored at least ``--keypoint_score`` labelled (v=2), the
  others not (v=0); its box the detector's (or ``--boxes``'), else the extent of its labelled keypoints;
- ``label_maps`` (seg): ``{split}/labels/NAME.png`` and ``classes.txt``: each pixel's most probable class where that
  probability is at least ``--min_score``, 255 (ignored by the loss) elsewhere.

Training on them is then the task's custom recipe on ``--data.root DIR`` (the command is printed at the end).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import yaml

from datamodules.boundary.writes import write_text
from datamodules.data_check import DataReport
from datamodules.errors import BadInput, Refused
from datamodules.keypoints.metainfo import load_metainfo
from sapiens2_ft.convert import summary
from sapiens2_ft.convert.masks import Mask
from sapiens2_ft.convert.names import NameMap
from sapiens2_ft.convert.output import Layout, LabelSets, write_dataset
from sapiens2_ft.convert.records import ImageRecord, Person, Region
from sapiens2_ft.exits import console_command
from sapiens2_ft.predict.boxes import FileBoxes, add_box_arguments, box_argument_problems, box_source, read_boxes, whole_image
from sapiens2_ft.predict.inputs import check_out, list_images, read_chunks
from sapiens2_ft.predict.loading import load_inference, model_problem
from sapiens2_ft.predict.run import Model, infer_chunk
from sapiens2_ft.problems import Problems

KEYPOINTS, LABEL_MAPS = "keypoints", "label_maps"  # the formats an inference class may declare


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m sapiens2_ft.pseudo_labels", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="exported dir, hub id, .ckpt or distributed checkpoint dir (pose "
                                                  "or seg)")
    p.add_argument("--input", required=True, help="a folder of images (searched recursively)")
    p.add_argument("--out", required=True, help="the data set folder to write (data.root)")
    p.add_argument("--min_score", type=float, default=0.5,
                   help="pose: a person's instance score; seg: a pixel's class probability; below it, left out")
    p.add_argument("--keypoint_score", type=float, default=0.3,
                   help="pose: keypoints scored below this are written unlabelled (v=0)")
    p.add_argument("--boxes", default=None, help="pose: person boxes (COCO json or list of detections)")
    add_box_arguments(p)
    p.add_argument("--val_fraction", type=float, default=0.1,
                   help="send this fraction of the images (seeded, at least one) to val, the rest to train")
    p.add_argument("--seed", type=int, default=0, help="seed of the --val_fraction draw")
    p.add_argument("--overwrite", action="store_true", help="replace output files that exist")
    p.add_argument("--batch_size", type=int, default=8, help="images (and person crops) per forward pass")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    return p


def argument_problems(args) -> Problems:
    problems = Problems(filter(None, [model_problem(args.model)]))
    problems.check(Path(args.input).is_dir(), f"--input: '{args.input}' is not a folder of images")
    problems.check(0 <= args.min_score <= 1, f"--min_score: a score between 0 and 1, got {args.min_score}")
    problems.check(0 <= args.keypoint_score <= 1, f"--keypoint_score: a score between 0 and 1, got "
                                                  f"{args.keypoint_score}")
    problems.check(0 <= args.val_fraction < 1, f"--val_fraction: a fraction in [0, 1), got {args.val_fraction}")
    problems.check(args.batch_size > 0, f"--batch_size: give at least 1, got {args.batch_size}")
    problems.check(not (args.boxes and (args.detector or args.boxes_from_seg)),
                   "--boxes, --detector, --boxes_from_seg: give one")
    problems += box_argument_problems(args)
    if Path(args.input).is_dir():
        try:
            check_out(Path(args.out), Path(args.input))
        except Refused as err:  # the data set would be written among the images read
            problems.append(str(err))
    return problems


@dataclass(frozen=True, eq=False)
class Pixels(Mask):
    """The pixels of one class in a predicted label map (a ``convert`` mask over the whole image)."""

    labels: np.ndarray = None
    value: int = 0

    def decode(self) -> np.ndarray:
        return self.labels == self.value


def person(found: dict, names: list[str], keypoint_score: float, boxed: bool, where: str) -> Person | None:
    """A predicted person as convert's ``Person``: keypoints scored at least ``keypoint_score``; its box when
    ``boxed`` (a detector's or a file's; a whole-image box says nothing of the person). None without a keypoint."""
    kept = {name: (float(x), float(y), 2) for name, (x, y), s in zip(names, found["points"], found["scores"])
            if s >= keypoint_score}
    if not kept:
        return None
    x, y, w, h = (float(v) for v in found["bbox"][:4])
    return Person(where, kept, (x, y, x + w, y + h) if boxed else None)


def regions(logits: np.ndarray, names: list[str], min_score: float) -> list[Region]:
    """A predicted label map as convert's regions: each class's pixels whose probability is at least ``min_score``."""
    probabilities = torch.from_numpy(logits).float().softmax(0)
    confidence, labels = probabilities.max(0)
    labels = np.where(confidence.numpy() >= min_score, labels.numpy(), -1)
    height, width = labels.shape
    return [Region(names[c], f"class {c}", mask=Pixels(width, height, labels=labels, value=int(c)))
            for c in np.unique(labels) if c >= 0]


def pseudo_records(args, inference, task: str, source) -> list[ImageRecord]:
    """One record per readable image of ``--input``: its people or regions that pass the scores."""
    images = list_images(Path(args.input))
    kind, names = inference.pseudo_labels, list(inference.labels)
    boxed = source is not whole_image
    records = []
    for keys, originals, _ in read_chunks(list(images.items()), args.batch_size, 2):
        for key, image, results in zip(keys, originals, infer_chunk([Model(inference, task)], keys, originals, source,
                                                                      args.batch_size, maps=kind == LABEL_MAPS)):
            result, where = results[task], f"image {key}"
            record = ImageRecord(Path(args.model), key, images[key], size=(image.shape[1], image.shape[0]),
                                 record=where)
            if kind == KEYPOINTS:
                people = [person(p, names, args.keypoint_score, boxed, where) for p in result.output
                          if p["score"] >= args.min_score]
                record.people = [p for p in people if p is not None]
            else:
                record.regions = regions(result.maps["logits"], names, args.min_score)
            records.append(record)
    return records


def train_command(out: Path, task: str, labels: list[str], keypoints_file: Path | None) -> str:
    """The command that trains on the written data set (the task's custom recipe)."""
    data = f"--data.keypoints {keypoints_file}" if keypoints_file else f"--data.num_classes {len(labels)}"
    return f"python train.py --config {task}_custom.yaml --data.root {out} {data}"


def pseudo_labels(args) -> int:
    out = Path(args.out)
    inference, task = load_inference(args.model, out / ".model", device=args.device)
    if inference.pseudo_labels is None:
        raise BadInput(f"--model: pseudo-labels are written for pose and seg models; {args.model} is a {task} model")
    source = whole_image
    if args.boxes:
        _, boxes = read_boxes(Path(args.boxes), list(list_images(Path(args.input))))
        source = FileBoxes(boxes)
    elif args.detector or args.boxes_from_seg:
        source = box_source(args, out)
    records = pseudo_records(args, inference, task, source)
    keypoints = inference.sheet_labels().metainfo or load_metainfo("coco17")  # seg: no keypoint set (unused)
    labels = LabelSets(keypoints, NameMap(keypoints.keypoint_names), NameMap(inference.labels))
    if inference.pseudo_labels == LABEL_MAPS and not any(r.regions for r in records):
        raise BadInput(f"--min_score {args.min_score}: no pixel of {len(records)} images is that sure; lower it")
    if inference.pseudo_labels == KEYPOINTS and not any(r.people for r in records):
        raise BadInput(f"--min_score {args.min_score}: nobody in {len(records)} images scores that high; lower it")
    result = write_dataset(records, out, labels, DataReport(), Layout(
        val_fraction=args.val_fraction, seed=args.seed, unlabelled="ignore", overwrite=args.overwrite))
    keypoints_file = None
    if inference.pseudo_labels == KEYPOINTS:
        keypoints_file = write_text(out, "keypoints.yaml", yaml.safe_dump(keypoints.to_dict(), sort_keys=False))
    print(summary(result, str(keypoints_file or "")))
    print(f"train on them: {train_command(out, task, list(inference.labels), keypoints_file)}")
    return 1 if result.check.fatal else 0


@console_command
def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    argument_problems(args).raise_any()
    return pseudo_labels(args)


if __name__ == "__main__":
    sys.exit(main())
