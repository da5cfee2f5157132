"""``python -m sapiens2_ft.export --checkpoint CKPT --out DIR [--push_to_hub REPO]``: a training checkpoint
as a Hugging Face model directory.

``DIR`` loads with ``transformers``' ``AutoModelFor<Task>.from_pretrained(DIR)``; what it holds is described in
``sapiens2_ft/training/hf_export.py``. ``CKPT`` is a ``.ckpt`` file or an FSDP2 distributed checkpoint directory.
``train.py`` exports the best checkpoint of every run to ``<run_dir>/export``.
"""

from __future__ import annotations

import argparse
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


if __name__ == "__main__":
    main()
