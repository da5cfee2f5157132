"""A synthetic dataset another process reads is not replaced (datamodules.synthetic.in_use)."""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from datamodules.synthetic import DatasetInUseError, ensure_dataset, generate_dataset
from datamodules.synthetic import in_use

pytestmark = pytest.mark.skipif(in_use.fcntl is None, reason="no flock on this platform")
ROOT = Path(__file__).resolve().parents[2]


def reader(root: Path) -> subprocess.Popen:
    """A process that takes the dataset as a training run does (``ensure_dataset``), then waits for stdin."""
    code = textwrap.dedent(f"""
        import sys
        from datamodules.synthetic import ensure_dataset
        ensure_dataset({str(root)!r}, 3, 1, 64, 48, val_fraction=0.34)
        print("holding", flush=True)
        sys.stdin.read()
    """)
    process = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline().strip() == "holding"
    return process


def test_a_dataset_in_use_is_not_replaced(tmp_path):
    root = tmp_path / "data"
    generate_dataset(root, 3, 1, 64, 48, val_fraction=0.34, progress=False)
    image = root / "train/images/000000.png"
    before = image.read_bytes()
    process = reader(root)
    try:
        with pytest.raises(DatasetInUseError, match="another process is reading it") as err:
            ensure_dataset(root, 4, 1, 64, 48, val_fraction=0.34)
        assert "3 images of seed 1" in str(err.value) and "asked for 4 images" in str(err.value)
        assert json.loads((root / "dataset.json").read_text())["num"] == 3 and image.read_bytes() == before
        assert not list(tmp_path.glob(".data.partial-*"))  # refused before rendering anything
        # The same parameters are no replacement: both processes read the dataset.
        assert ensure_dataset(root, 3, 1, 64, 48, val_fraction=0.34) == root.absolute()
    finally:
        process.communicate("")
    in_use.release(root)
    ensure_dataset(root, 4, 1, 64, 48, val_fraction=0.34)  # the reader has ended
    assert json.loads((root / "dataset.json").read_text())["num"] == 4


def test_this_process_replaces_its_own_dataset(tmp_path):
    """A process that read a dataset (held it) may still replace it: no other process reads it."""
    root = tmp_path / "data"
    ensure_dataset(root, 3, 1, 64, 48, val_fraction=0.34)
    assert root.absolute() in in_use._HELD
    ensure_dataset(root, 4, 1, 64, 48, val_fraction=0.34)
    assert json.loads((root / "dataset.json").read_text())["num"] == 4
    assert root.absolute() in in_use._HELD  # held again, the new one
    in_use.release(root)
