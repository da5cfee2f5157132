"""``python -m sapiens2_ft.export --checkpoint CKPT --out DIR [--format hf|onnx] [--push_to_hub REPO]``: a training
checkpoint as a Hugging Face model directory, and with ``--format onnx`` also as an ONNX model beside it.

``DIR`` loads with ``transformers``' ``AutoModelFor<Task>.from_pretrained(DIR)``; what it holds is described in
``sapiens2_ft/training/hf_export.py``. ``CKPT`` is a ``.ckpt`` file or an FSDP2 distributed checkpoint directory.
``train.py`` exports the best checkpoint of every run to ``<run_dir>/export``. A ``DIR`` holding files an export
did not write is refused unless ``--overwrite`` (which replaces only the export's files there). In Python the module itself is
the API's ``export``: ``sapiens2_ft.export(checkpoint, out)`` (``sapiens2_ft/api.py``).

``--format onnx`` adds ``DIR/model.onnx`` (dynamic batch, the input size of the checkpoint, ``--dtype`` float32 or
float16; ``models/onnx.py``) and ``DIR/onnx_config.json``: what a runtime needs around the graph (input size, colour
order and normalisation, resize rule, labels, flip pairs, output shapes and how to decode them). ``--checkpoint``
may also be an exported directory, to add the ONNX model to it. Needs ``pip install 'sapiens2-ft[onnx]'``.
"""

from __future__ import annotations

import argparse
import sys
import types
from pathlib import Path

from sapiens2_ft.models.checkpoints import CheckpointError
from sapiens2_ft.models.onnx import DTYPES
from sapiens2_ft.training.export_dir import ExportFolderError
from sapiens2_ft.training.hf_export import export_checkpoint
from sapiens2_ft.training.onnx_export import write_onnx


def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(prog="python -m sapiens2_ft.export", description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", required=True, help=".ckpt file or distributed checkpoint directory")
    parser.add_argument("--out", default=None, help="output directory (created); not for an exported --checkpoint")
    parser.add_argument("--format", default="hf", choices=["hf", "onnx"],
                        help="hf: the Hugging Face directory; onnx: that directory plus model.onnx and onnx_config.json")
    parser.add_argument("--dtype", default="float32", choices=sorted(DTYPES), help="--format onnx: the graph's dtype")
    parser.add_argument("--push_to_hub", default=None, metavar="REPO",
                        help="also upload the export's files (export_manifest.json) to this Hub repo id")
    parser.add_argument("--overwrite", action="store_true",
                        help="export into a folder holding other files: replace the export's files there, keep the rest")
    args = parser.parse_args(argv)
    source = Path(args.checkpoint)
    if (source / "config.json").is_file():  # already exported: add the ONNX model beside it
        if args.format != "onnx":
            raise SystemExit(f"--checkpoint: {source} is an exported directory already; --format onnx adds ONNX")
        out = source
    elif args.out is None:
        raise SystemExit("--out: give the output directory")
    else:
        try:
            out = export_checkpoint(args.checkpoint, args.out, None if args.format == "onnx" else args.push_to_hub,
                                    overwrite=args.overwrite)
        except (CheckpointError, ExportFolderError) as err:
            raise SystemExit(f"export: {err}") from None
        print(f"exported {args.checkpoint} -> {out}")
    if args.format == "onnx":
        write_onnx(out, args.dtype)
        if args.push_to_hub:
            from sapiens2_ft.training.hf_export import push_directory

            push_directory(out, args.push_to_hub)
    return out


class _CallableModule(types.ModuleType):
    """``sapiens2_ft.export`` names both this module and the API function; calling the module exports."""

    def __call__(self, checkpoint, out, push_to_hub: str | None = None, overwrite: bool = False) -> Path:
        from sapiens2_ft.api import export

        return export(checkpoint, out, push_to_hub, overwrite)


sys.modules[__name__].__class__ = _CallableModule

if __name__ == "__main__":
    main()
