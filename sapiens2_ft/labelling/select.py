"""``sapiens2-ft select --model EXPORT --input unlabeled/ --budget N --out OUT``: the unlabelled images worth a
person's time, the ones the model is least sure of (docs/labelling.md).

Pose: each person's crop is run as it is and mirrored (the two halves of the flip test); a person is unsure when the
keypoint scores are low or the two answers disagree (``1 - mean score x OKS of the two``). Seg: ``1 - margin``
between the two most probable classes, averaged over the people's pixels. ``--diversity W`` spreads the picks over
the poses (or class mixes) instead of taking the N most unsure, which are often near-duplicates. Writes
``OUT/selected.txt`` (the picked images' paths relative to --input, in the order picked), ``OUT/ranking.csv``
(every image: how unsure, its rank, picked or not) and, with ``--format``, their pre-annotations into OUT.
"""

from __future__ import annotations

import argparse
import csv
import io
import sys
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from datamodules.errors import Sapiens2FTError
from sapiens2_ft.exits import console_command
from sapiens2_ft.labelling.formats import (FORMATS, add_format_arguments, format_problems, inside_input, options_of,
                                           preannotate)
from sapiens2_ft.labelling.predictions import LabellingError, class_unsure, label_kind, pose_unsure
from sapiens2_ft.labelling.selection import choose
from sapiens2_ft.problems import raise_problems

NONE = "none"


def parser() -> argparse.ArgumentParser:
    from sapiens2_ft.predict.boxes import add_box_arguments

    p = argparse.ArgumentParser(prog="sapiens2-ft select", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="an exported dir, hub id or checkpoint (a pose or seg model)")
    p.add_argument("--input", required=True, help="the folder of unlabelled images (searched recursively)")
    p.add_argument("--budget", type=int, required=True, help="how many images to pick")
    p.add_argument("--out", required=True, help="output folder (created): selected.txt, ranking.csv, pre-annotations")
    p.add_argument("--diversity", type=float, default=0.0,
                   help="0: the most unsure first; up to 1: each pick also far from those already picked (poses or "
                        "class mixes), so that the picks are not near-duplicates")
    p.add_argument("--boxes", default=None, help="pose: person boxes (COCO json or list of detections)")
    p.add_argument("--whole_image", action="store_true", help="pose: each image is one person")
    add_box_arguments(p)
    p.add_argument("--keypoints", default=None, help="pose: keypoint set when the model dir has none")
    p.add_argument("--batch_size", type=int, default=8, help="images (and person crops) per forward pass")
    p.add_argument("--workers", type=int, default=2, help="threads decoding the next images (0: in line)")
    p.add_argument("--max_pixels", type=int, default=None, help="skip images of more pixels than this")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    add_format_arguments(p, default=NONE)
    return p


def argument_problems(args) -> list[str]:
    from sapiens2_ft.predict.boxes import box_argument_problems
    from sapiens2_ft.predict.inputs import check_out
    from sapiens2_ft.predict.loading import model_problem

    problems = [p for p in [model_problem(args.model)] if p]
    if not Path(args.input).is_dir():
        problems.append(f"--input: '{args.input}' is not a folder of images")
    else:
        try:
            check_out(Path(args.out), Path(args.input))
        except Sapiens2FTError as err:
            problems.append(str(err))
    if args.budget < 1:
        problems.append(f"--budget: at least 1 image, got {args.budget}")
    if not 0 <= args.diversity <= 1:
        problems.append(f"--diversity: a weight in [0, 1], got {args.diversity}")
    if args.boxes and not Path(args.boxes).is_file():
        problems.append(f"--boxes: '{args.boxes}' is not a file")
    given = [f"--{n}" for n in ("boxes", "detector", "boxes_from_seg", "whole_image") if getattr(args, n)]
    if len(given) > 1:
        problems.append(f"{' and '.join(given)}: give one of them")
    return problems + box_argument_problems(args) + format_problems(args)


def unsure_images(inference, images: dict[str, Path], source, batch_size: int = 8, workers: int = 2,
                  max_pixels: int | None = None, skipped: list | None = None) -> dict[str, tuple[float, np.ndarray]]:
    """Per readable image (key -> (how unsure the model is, in [0, 1]; a feature of what it found)); see the module
    docstring."""
    from sapiens2_ft.predict.inputs import read_chunks

    kind = label_kind(inference.task)
    found: dict[str, tuple[float, np.ndarray]] = {}
    progress = tqdm(total=len(images), desc="select", unit="image")
    with torch.no_grad():
        for keys, originals, unreadable in read_chunks(list(images.items()), batch_size, workers, max_pixels):
            if skipped is not None:
                skipped += unreadable
            if kind == "keypoint":
                scored = pose_unsure(inference, originals, source(keys, originals), inference.metainfo.sigmas,
                                     batch_size)
            else:
                scored = [class_unsure(inference.class_probabilities(out))
                          for out in inference.image_outputs(originals)]
            found.update(zip(keys, scored))
            progress.update(len(keys) + len(unreadable))
    progress.close()
    return found


def ranking_csv(found: dict[str, tuple[float, np.ndarray]], picked: list[str]) -> str:
    """key, unsure (4 decimals), rank by unsureness (1 = most), pick (its place in the list, empty if not picked)."""
    order = sorted(found, key=lambda k: -found[k][0])
    place = {k: i + 1 for i, k in enumerate(picked)}
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["image", "unsure", "rank", "pick"])
    for rank, key in enumerate(order, 1):
        writer.writerow([key, f"{found[key][0]:.4f}", rank, place.get(key, "")])
    return buffer.getvalue()


def box_source_of(args, out: Path, images: dict[str, Path]):
    """The person boxes as predict finds them (``--boxes``, ``--whole_image``, a seg model, else the detector)."""
    from sapiens2_ft.models.detector import DEFAULT_DETECTOR
    from sapiens2_ft.predict.boxes import FileBoxes, box_source, read_boxes, whole_image

    if args.whole_image:
        return whole_image
    if args.boxes:
        return FileBoxes(read_boxes(Path(args.boxes), list(images))[1])
    if not (args.detector or args.boxes_from_seg):
        args.detector, args.detector_by_default = DEFAULT_DETECTOR, True
    return box_source(args, out)


def run(args) -> list[str]:
    """The picked keys (see the module docstring); files written into ``args.out``."""
    from datamodules.boundary.writes import write_text
    from sapiens2_ft.predict.inputs import list_images
    from sapiens2_ft.predict.loading import load_inference
    from sapiens2_ft.predict.run import Model

    out = Path(args.out)
    inference, task = load_inference(args.model, out, args.keypoints, args.device)
    label_kind(task)
    images = inside_input(list_images(Path(args.input)), Path(args.input))
    source = box_source_of(args, out, images) if inference.takes_person_boxes else None
    skipped: list[str] = []
    found = unsure_images(inference, images, source, args.batch_size, args.workers, args.max_pixels, skipped)
    if not found:
        raise LabellingError(f"--input: none of the {len(images)} images could be read")
    keys = sorted(found)
    picks = choose([found[k][0] for k in keys], [found[k][1] for k in keys], args.budget, args.diversity)
    picked = [keys[i] for i in picks]
    write_text(out, "selected.txt", "".join(f"{k}\n" for k in picked))
    write_text(out, "ranking.csv", ranking_csv(found, picked))
    lines = [f"picked {len(picked)} of {len(found)} images -> {out / 'selected.txt'} (every image's score: "
             f"{out / 'ranking.csv'}); {len(skipped)} skipped (unreadable or too large)"]
    if args.format in FORMATS:
        written, _ = preannotate([Model(inference, task, out)], [args.model], {k: images[k] for k in picked}, source,
                                 options_of(args), args.batch_size, args.workers, args.max_pixels)
        lines += written
    print("\n".join(lines))
    return picked


@console_command
def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    raise_problems(argument_problems(args))
    run(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
