"""``sapiens2-ft label-config``: what a labelling project needs before the pre-annotations are imported, with the
names they use: Label Studio's labelling config (XML) or a CVAT project's labels (the JSON of its "Raw" label editor),
of a model's keypoint or class set, or of a set named directly (docs/labelling.md)."""

from __future__ import annotations

import argparse
import sys

from sapiens2_ft.exits import console_command
from sapiens2_ft.labelling.cvat import labels_json
from sapiens2_ft.labelling.formats import model_version
from sapiens2_ft.labelling.label_studio import config_xml
from sapiens2_ft.labelling.predictions import LabellingError, LabelSet

TOOLS = {"labelstudio": config_xml, "cvat": labels_json}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sapiens2-ft label-config", description=__doc__.split("\n\n")[0])
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--model", help="an exported dir, hub id or checkpoint: its keypoint or class set")
    which.add_argument("--keypoints", help="a keypoint set: a built-in name (coco17, ...) or a metainfo YAML")
    which.add_argument("--classes", help="a class set: a file (one name a line, or a YAML list) or 'a,b,c'; "
                                         "'parts': the 29 Sapiens2 body parts")
    p.add_argument("--tool", choices=list(TOOLS), default="labelstudio", help="the labelling tool")
    p.add_argument("--device", default="cpu", help="--model: where it is loaded")
    return p


def label_set(args) -> LabelSet:
    """The set the arguments name (``--model``'s own, read from the model)."""
    if args.model:
        import tempfile
        from pathlib import Path

        from sapiens2_ft.predict.loading import load_inference

        inference, _ = load_inference(args.model, Path(tempfile.mkdtemp(prefix="label-config-")), None, args.device)
        return LabelSet.of(inference, model_version(args.model))
    if args.keypoints:
        from datamodules.keypoints.metainfo import MetainfoError, load_metainfo

        try:
            meta = load_metainfo(args.keypoints)
        except MetainfoError as err:
            raise LabellingError(str(err)) from None
        return LabelSet("keypoint", list(meta.keypoint_names), meta.name, [tuple(p) for p in meta.skeleton])
    from datamodules.body_parts import SAPIENS2_PART_CLASSES
    from sapiens2_ft.convert import ConvertError
    from sapiens2_ft.convert.names import load_classes

    try:
        names = list(SAPIENS2_PART_CLASSES) if args.classes == "parts" else load_classes(args.classes)
    except ConvertError as err:
        raise LabellingError(str(err)) from None
    return LabelSet("class", names, "classes")


@console_command
def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    labels = label_set(args)
    sys.stdout.write(TOOLS[args.tool](labels))
    return 0


if __name__ == "__main__":
    sys.exit(main())
