"""A Hugging Face cache that holds local models under hub ids, laid out as ``hf download`` leaves it: how a test
runs a released model's code path (``facebook/sapiens2-pose-0.4b``, the default person detector) offline, as a
user who has downloaded it does. ``HF_HUB_OFFLINE=1`` makes the hub client read it without the network."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path


def write_hub_cache(cache: Path, models: dict[str, Path]) -> Path:
    """``cache/models--ORG--NAME/snapshots/COMMIT/`` holding a copy of each directory, ``refs/main`` naming it."""
    for repo_id, source in models.items():
        org, name = repo_id.split("/")
        repo = cache / f"models--{org}--{name}"
        commit = hashlib.sha1(repo_id.encode()).hexdigest()
        shutil.copytree(source, repo / "snapshots" / commit, dirs_exist_ok=True)
        (repo / "refs").mkdir(parents=True, exist_ok=True)
        (repo / "refs" / "main").write_text(commit)
    return cache


def use_hub_cache(monkeypatch, cache: Path) -> None:
    """This process and the ones it starts read ``cache`` as the hub, offline."""
    import huggingface_hub.constants

    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
