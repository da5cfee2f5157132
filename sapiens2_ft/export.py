"""``python -m sapiens2_ft.export --checkpoint CKPT --out DIR [--push_to_hub REPO]``: a training checkpoint
as a Hugging Face model directory.

``DIR`` loads with ``transformers``' ``AutoModelFor<Task>.from_pretrained(DIR)``; what it holds is described in
``sapiens2_ft/training/hf_export.py``. ``CKPT`` is a ``.ckpt`` file or an FSDP2 distributed checkpoint directory.
``train.py`` exports the best checkpoint of every run to ``<run_dir>/export``. In Python the module itself is
the API's ``export``: ``sapiens2_ft.export(checkpoint, out)`` (``sapiens2_ft/api.py``).
"""

from __future__ import annotations

import argparse
import sys
import types
from pathlib import Path

from sapiens2_ft.training.hf_export import export_checkpoint


def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(prog="python -m sapiens2_ft.export", description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", required=True, help=".ckpt file or distributed checkpoint directory")
    parser.add_argument("--out", required=True, help="output directory (created)")
    parser.add_argument("--push_to_hub", default=None, metavar="REPO", help="also upload to this Hub repo id")
    args = parser.parse_args(argv)
    out = export_checkpoint(args.checkpoint, args.out, args.push_to_hub)
    print(f"exported {args.checkpoint} -> {out}")
    return out


class _CallableModule(types.ModuleType):
    """``sapiens2_ft.export`` names both this module and the API function; calling the module exports."""

    def __call__(self, checkpoint, out, push_to_hub: str | None = None) -> Path:
        from sapiens2_ft.api import export

        return export(checkpoint, out, push_to_hub)


sys.modules[__name__].__class__ = _CallableModule

if __name__ == "__main__":
    main()
