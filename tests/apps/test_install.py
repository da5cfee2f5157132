"""A plain (non-editable) install works outside the repository: the wheel is built, installed into a fresh venv,
and ``sapiens2-ft train --config pose_demo.yaml`` then ``sapiens2-ft predict`` run from an empty folder (the
packaged recipe, the shipped demo backbone, the keypoint sets; the synthetic data rendered into that folder's
``data/``).

The fresh venv reuses this venv's packages, so the torch there is the README's CPU pin and nothing is downloaded:
``python -m venv --system-site-packages`` from inside a venv would expose the base interpreter's packages, not
this venv's, so the new venv gets a ``.pth`` line naming this venv's site-packages instead, and the wheel goes in
with ``pip install --no-deps --no-index``. Lines of a ``.pth`` file add a folder without running the ``.pth``
files in it, so the editable install of the checkout stays inactive: the test checks that the package running is
the wheel's copy. The wheel is built with ``--no-build-isolation`` by this venv's setuptools (the ``dev`` extra)
from a copy of the source tree (git's files), so the checkout gets no ``build/`` folder.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SMALL_DEMO = ["--trainer.max_steps", "2", "--data.synthetic.num_images", "10", "--data.batch_size", "2",
              "--data.num_workers", "0", "--tracking.logger", "csv", "--trainer.enable_progress_bar", "false"]


def source_copy(dest: Path) -> Path:
    """The files a clone has (tracked, and new ones git does not ignore), copied to ``dest``."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                            capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        if (REPO / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, dest / name)
    return dest


def run(cmd: list, cwd: Path, env: dict, timeout: int = 600) -> str:
    result = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    shown = " ".join(str(c) for c in cmd)
    assert result.returncode == 0, f"{shown} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result.stdout + result.stderr


@pytest.mark.slow
def test_wheel_installs_and_runs_the_demo_from_any_folder(tmp_path):
    if not (REPO / ".git").exists():
        pytest.skip("needs the git checkout to know the source files")
    env = {**os.environ, "WANDB_MODE": "offline", "NO_ALBUMENTATIONS_UPDATE": "1", "HF_HUB_OFFLINE": "1"}
    env.pop("PYTHONPATH", None)
    source = source_copy(tmp_path / "src")
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", tmp_path / "dist",
         source], tmp_path, env)
    [wheel] = (tmp_path / "dist").glob("sapiens2_ft-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for shipped in ("sapiens2_ft/_shipped/configs/pose_demo.yaml", "sapiens2_ft/_shipped/configs/strategy/fsdp2.yaml",
                    "sapiens2_ft/_shipped/assets/sapiens2-mini-synthetic/model.safetensors",
                    "datamodules/keypoints/coco17.yaml", "datamodules/keypoints/LICENSE-sapiens2.md"):
        assert shipped in names, shipped

    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", venv], tmp_path, env)
    python = venv / "bin" / "python"
    site = Path(run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], tmp_path, env)
                .strip())
    (site / "reuse_test_venv.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    run([python, "-m", "pip", "install", "--no-deps", "--no-index", wheel], tmp_path, env)
    where = run([python, "-c", "import sapiens2_ft, datamodules; print(sapiens2_ft.__file__, datamodules.__file__)"],
                tmp_path, env)
    assert str(REPO) not in where and str(site) in where, where

    work = tmp_path / "work"
    work.mkdir()
    command = venv / "bin" / "sapiens2-ft"
    assert "check-data" in run([command, "--help"], work, env)
    assert "pose_demo.yaml" in run([command, "train", "--list-configs"], work, env)
    out = run([command, "train", "--config", "pose_demo.yaml", *SMALL_DEMO], work, env)
    assert "model for transformers / predict:" in out
    assert (work / "data" / "synthetic" / "dataset.json").is_file()
    [summary_file] = (work / "runs" / "pose_demo").glob("*/summary.json")
    summary = json.loads(summary_file.read_text())
    assert summary["global_step"] == 2 and "assets/sapiens2-mini-synthetic: backbone pretrained" in summary["model"]
    images = work / "data" / "synthetic" / "val" / "images"
    boxes = work / "data" / "synthetic" / "annotations" / "val.json"  # the people's boxes (no detector offline)
    run([command, "predict", "--model", summary["export"], "--input", images, "--boxes", boxes,
         "--out", work / "predicted"], work, env)
    results = json.loads((work / "predicted" / "keypoints.json").read_text())
    people = json.loads(boxes.read_text())["annotations"]
    assert len(results) == len(people) and len(results[0]["keypoints"]) == 21 * 3  # coco17_feet
