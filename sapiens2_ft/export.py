"""``python -m sapiens2_ft.export --checkpoint CKPT --out DIR [--format hf|onnx] [--push_to_hub REPO [--private]]``: a
training checkpoint as a Hugging Face model directory with its model card, and with ``--format onnx`` also as an
ONNX model beside it.

``DIR`` loads with ``transformers``' ``AutoModelFor<Task>.from_pretrained(DIR)``; what it holds is described in
``sapiens2_ft/training/hf_export.py``. ``CKPT`` is a ``.ckpt`` file or an FSDP2 distributed checkpoint directory.
``train.py`` exports the best checkpoint of every run to ``<run_dir>/export``. A ``DIR`` holding files an export
did not write is refused unless ``--overwrite`` (which replaces only the export's files there). In Python the module itself is
the API's ``export``: ``sapiens2_ft.export(checkpoint, out)`` (``sapiens2_ft/api.py``).

``--format onnx`` adds ``DIR/model.onnx`` (dynamic batch, the input size of the checkpoint, ``--dtype`` float32 or
float16; ``models/onnx.py``) and ``DIR/onnx_config.json``: what a runtime needs around the graph (input size, colour
order and normalisation, resize rule, labels, flip pairs, output shapes and how to decode them). ``--checkpoint``
may also be an exported directory, to add the ONNX model to it. Needs ``pip install 'sapiens2-ft[onnx]'``.

``--push_to_hub REPO`` uploads the directory's own files to the Hub model repository REPO (created if missing;
``--private`` makes a new one private), its card naming REPO (``training/hub.py``). ``--checkpoint`` may be an exported
directory, to upload it (again). Needs ``hf auth login`` with a write token; a refusal is one line.
"""

from __future__ import annotations

import argparse
import sys
import types
from pathlib import Path

from datamodules.errors import RefusedInput
from sapiens2_ft.exits import console_command
from sapiens2_ft.models.checkpoints import CheckpointError
from sapiens2_ft.models.onnx import DTYPES
from sapiens2_ft.problems import Problems
from sapiens2_ft.training.export_dir import ExportFolderError
from sapiens2_ft.training.hf_export import export_checkpoint
from sapiens2_ft.training.hub import hub_access_problems, hub_problems, push_export
from sapiens2_ft.training.onnx_export import write_onnx


@console_command
def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(prog="python -m sapiens2_ft.export", description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", required=True, help=".ckpt file or distributed checkpoint directory")
    parser.add_argument("--out", default=None, help="output directory (created); not for an exported --checkpoint")
    parser.add_argument("--format", default="hf", choices=["hf", "onnx"],
                        help="hf: the Hugging Face directory; onnx: that directory plus model.onnx and onnx_config.json")
    parser.add_argument("--dtype", default="float32", choices=sorted(DTYPES), help="--format onnx: the graph's dtype")
    parser.add_argument("--push_to_hub", default=None, metavar="REPO",
                        help="also upload the export's own files (export_manifest.json) to this Hub model repository "
                             "(user/name or org/name)")
    parser.add_argument("--private", action="store_true", help="--push_to_hub: create the repository private")
    parser.add_argument("--overwrite", action="store_true",
                        help="export into a folder holding other files: replace the export's files there, keep the rest")
    args = parser.parse_args(argv)
    source = Path(args.checkpoint)
    exported = (source / "config.json").is_file()
    problems = Problems(hub_problems(args.push_to_hub, "--push_to_hub"))  # all before the export's work
    problems.check(not args.private or bool(args.push_to_hub), "--private is for --push_to_hub: give the repository "
                                                               "too")
    problems.check(source.exists(), f"--checkpoint: '{source}' does not exist (a .ckpt file, a distributed "
                                    f"checkpoint directory or an exported directory)")
    problems.check(not exported or args.format == "onnx" or bool(args.push_to_hub),
                   f"--checkpoint: {source} is an exported directory already; --format onnx adds ONNX, "
                   f"--push_to_hub uploads it")
    problems.check(exported or args.out is not None, "--out: give the output directory")
    if not problems:  # then the Hub is asked: the token, the namespace, the way to it
        problems += hub_access_problems(args.push_to_hub, args.private, "--push_to_hub")
    problems.raise_any()
    if exported:  # already exported: add the ONNX model beside it, or upload it
        out = source
    else:
        try:
            out = export_checkpoint(args.checkpoint, args.out, overwrite=args.overwrite)
        except (CheckpointError, ExportFolderError) as err:
            raise err.with_message(f"export: {err}") from None
        print(f"exported {args.checkpoint} -> {out}")
    if args.format == "onnx":
        try:
            write_onnx(out, args.dtype)
        except RefusedInput as err:  # a link among a handed export's files: named, nothing read or written
            raise err.with_message(f"export: {err}") from None
    if args.push_to_hub:
        url = push_export(out, args.push_to_hub, args.private)  # HubError: one line that says what to do
        print(f"uploaded {out} -> {url}")
    return out


class _CallableModule(types.ModuleType):
    """``sapiens2_ft.export`` names both this module and the API function; calling the module exports."""

    def __call__(self, checkpoint, out, push_to_hub: str | None = None, private: bool = False,
                 overwrite: bool = False) -> Path:
        from sapiens2_ft.api import export

        return export(checkpoint, out, push_to_hub, private, overwrite)


sys.modules[__name__].__class__ = _CallableModule

if __name__ == "__main__":
    main()
