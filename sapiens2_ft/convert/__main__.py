"""``python -m sapiens2_ft.convert FORMAT SRC --out DIR``: an annotation tool's export -> COCO keypoints json and
images (pose) and label PNGs (seg) in the layouts the data modules read by default (docs/convert.md).

Prints what was written, how the tool's names mapped onto the keypoint and class sets (counts per name), every
problem of the export (file, record, shape) and the data check of the output. Exit status: 0; 1 when the export
had records that had to be left out or the output check failed; 2 when nothing could be converted (an export
over its ``--budget`` included: nothing is decoded or written then).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from datamodules.errors import DataError
from datamodules.keypoints.metainfo import MetainfoError, load_metainfo
from sapiens2_ft.convert import FORMATS, Budget, ConvertError, convert, summary
from sapiens2_ft.convert.names import load_classes, parse_rename
from sapiens2_ft.exits import console_command
from sapiens2_ft.problems import Problems, report


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m sapiens2_ft.convert", description=__doc__.split("\n\n")[0])
    p.add_argument("format", choices=list(FORMATS), help="the tool the export comes from")
    p.add_argument("src", help="the export's folder (yolo-pose: the folder holding data.yaml)")
    p.add_argument("--out", required=True, help="the data set folder to write (data.root)")
    p.add_argument("--keypoints", default="coco17",
                   help="keypoint set the tool's names map onto: built-in name or metainfo YAML (default coco17); "
                        "yolo-pose: the set its rows follow, in order")
    p.add_argument("--classes", default=None,
                   help="seg class set: a built-in set (sapiens2_29, coarse) or class set YAML (a merge takes the "
                        "labels of the classes it is made from), a file (one name a line, or a YAML list) or 'a,b,c' "
                        "(default: the 29 Sapiens2 body parts); index 0 is the background")
    p.add_argument("--rename", nargs="*", default=[], metavar="OLD=NEW",
                   help="tool names to read as another keypoint / class name before matching")
    p.add_argument("--split", default=None,
                   help="split every image goes to (default train; yolo-pose keeps its data.yaml splits)")
    p.add_argument("--val_fraction", type=float, default=0.0,
                   help="send this fraction of the images (seeded, at least one) to val, the rest to --split")
    p.add_argument("--seed", type=int, default=0, help="seed of the --val_fraction draw")
    p.add_argument("--unlabelled", choices=("background", "ignore"), default="background",
                   help="seg pixels no polygon or mask covers: class 0, or 255 (ignored by the loss)")
    p.add_argument("--overwrite", action="store_true", help="replace output files that exist")
    p.add_argument("--budget", nargs="*", default=[], metavar="KEY=N",
                   help="the most the export may declare, checked before anything is decoded: bytes (of its "
                        "annotation files, default 32 GiB), shapes (20,000,000), points (200,000,000), masks "
                        "(1,000,000), mask_pixels (the pixels of all masks' boxes; default 100,000 per byte of the "
                        "annotation files, at least 1e9); e.g. --budget masks=2e6,mask_pixels=5e11")
    return p


def argument_problems(args) -> list[str]:
    """Every problem of the arguments seen before the export is read, each naming its argument."""
    problems = Problems()
    problems.check(Path(args.src).is_dir(), f"{args.src}: not a folder (give the folder of the export)")
    problems.check(not Path(args.out).is_file(), f"--out {args.out}: a file; give the data set's folder")
    problems.check(0 <= args.val_fraction < 1, f"--val_fraction {args.val_fraction}: expected a fraction between 0 "
                                               f"and 1")
    for check in (lambda: load_metainfo(args.keypoints), lambda: load_classes(args.classes),
                  lambda: parse_rename(args.rename), lambda: Budget.parse(args.budget)):
        try:
            check()
        except (ConvertError, MetainfoError) as err:
            problems.append(str(err))
    return problems


@console_command
def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    problems = argument_problems(args)
    if problems:
        print(f"error: {report(problems)}", file=sys.stderr)
        return 2
    try:
        result = convert(args.format, args.src, args.out, args.keypoints, args.classes, args.rename,
                         Budget.parse(args.budget), split=args.split, val_fraction=args.val_fraction, seed=args.seed,
                         unlabelled=args.unlabelled, overwrite=args.overwrite)
    except (ConvertError, MetainfoError, DataError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(summary(result, args.keypoints))
    if result.problems.fatal or result.check.fatal:
        print(f"{len(result.problems.fatal)} bad records of the export were left out; "
              f"{len(result.check.fatal)} problems in the output", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
