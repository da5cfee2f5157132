"""Converting annotation-tool exports into this project's data layouts (``python -m sapiens2_ft.convert``).

One reader per format (``labelme``, ``cvat``, ``label_studio``, ``yolo_pose``; ``coco`` for CVAT's COCO
keypoints export) turns the export into ``records.ImageRecord`` s, counting what it declares against the
export's ``budget.Budget`` (masks kept encoded: ``masks.py``); ``output.write_dataset`` maps the names
(``names.py``), writes the pose and seg layouts and runs the data modules' checks on what it wrote.
"""

from __future__ import annotations

from pathlib import Path

from datamodules.body_parts import SAPIENS2_PART_CLASSES
from datamodules.data_check import DataReport
from datamodules.keypoints.metainfo import load_metainfo
from sapiens2_ft.convert import cvat, label_studio, labelme, yolo_pose
from sapiens2_ft.convert.budget import Budget, Tally
from sapiens2_ft.convert.names import NameMap, class_map, name_report, parse_rename
from sapiens2_ft.convert.output import ConvertResult, LabelSets, Layout, write_dataset
from sapiens2_ft.convert.records import ConvertError

FORMATS = {"labelme": labelme.read, "cvat": cvat.read, "label-studio": label_studio.read, "yolo-pose": yolo_pose.read}


def convert(format: str, src, out, keypoints: str = "coco17", classes: str | None = None,
            rename: list[str] | None = None, budget: Budget | None = None, **layout) -> ConvertResult:
    """Convert the export in ``src`` into ``out``; see ``python -m sapiens2_ft.convert --help``. ``budget``: what
    the export may declare (default ``Budget()``). ``layout``: the fields of ``output.Layout`` (``split``,
    ``val_fraction``, ``seed``, ``unlabelled``, ``overwrite``)."""
    if format not in FORMATS:
        raise ConvertError(f"unknown format {format!r}: one of {', '.join(FORMATS)}")
    src = Path(src)
    if not src.is_dir():
        raise ConvertError(f"{src}: not a folder (give the folder of the export)")
    metainfo = load_metainfo(keypoints)
    names = parse_rename(rename)
    problems = DataReport()
    records = FORMATS[format](src, problems, metainfo, Tally(budget))
    labels = LabelSets(metainfo, NameMap(metainfo.keypoint_names, names), class_map(classes, names))
    return write_dataset(records, Path(out), labels, problems, Layout(**layout))


def summary(result: ConvertResult, keypoints: str = "coco17") -> str:
    """What was written, the name mapping report, every problem of the export, and the check of the output."""
    lines = [f"wrote {result.out}:"]
    for split, counts in sorted(result.splits.items()):
        lines.append(f"  {split}: " + ", ".join(f"{n} {what}" for what, n in counts.items()))
    if result.skipped_images:
        lines.append(f"  {len(result.skipped_images)} images left out (see the problems below)")
    if result.pose:
        lines += name_report(f"keypoints -> {keypoints}", result.keypoints, result.people)
    if result.seg:
        lines += name_report("labels -> classes", result.classes)
        if result.images_without_regions:
            lines.append(f"  {result.images_without_regions} images have no polygon or mask: their label maps are "
                         "all 255 (ignored)")
    lines.append("problems in the export:" if result.problems.problems else "problems in the export: none")
    if result.problems.problems:
        lines.append("  " + result.problems.format().replace("\n", "\n  "))
    lines.append("check of the output (as check_data):")
    lines.append("  " + result.check.format().replace("\n", "\n  "))
    if result.pose:
        lines.append(f"train pose with: --data.root {result.out} --data.keypoints {keypoints}")
    if result.seg:
        classes = result.classes.targets
        lines.append(f"train seg with: --data.root {result.out} " + (
            f"--data.classes {result.classes.class_set}" if result.classes.class_set else
            f"--data.num_classes {len(classes)}" + ("" if classes == list(SAPIENS2_PART_CLASSES) else
                                                    f" --data.class_names \"[{', '.join(classes)}]\"")))
    return "\n".join(lines)


__all__ = ["FORMATS", "Budget", "ConvertError", "ConvertResult", "convert", "summary"]
