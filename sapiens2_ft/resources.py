"""Files shipped beside the code: the recipes (``configs/``) and the demo backbone (``assets/``).

In a checkout or an editable install they are the repository's top-level folders. A wheel carries copies in
``sapiens2_ft/_shipped/{configs,assets}``, written at build time by ``setup.py`` (the top level stays as the
user laid it out), so ``--config pose_demo.yaml`` and the demo configs' ``model.pretrained:
assets/sapiens2-mini-synthetic`` resolve after a plain ``pip install`` from any folder. The keypoint sets are
package data of ``datamodules`` (``datamodules/keypoints/``). Imports nothing of this project.
"""

from __future__ import annotations

from pathlib import Path, PurePath

from datamodules.boundary.files import read_text

PACKAGE_DIR = Path(__file__).resolve().parent
SHIPPED_DIR = PACKAGE_DIR / "_shipped"  # only in an installed wheel
SHIPPED_FOLDERS = ("configs", "assets")


def shipped_root() -> Path:
    """The folder holding ``configs/`` and ``assets/``: the wheel's copy, else the checkout's top level."""
    return SHIPPED_DIR if SHIPPED_DIR.is_dir() else PACKAGE_DIR.parent


def config_dir() -> Path:
    """Where ``--config NAME`` looks when NAME is not a path."""
    return shipped_root() / "configs"


def shipped_asset(path: str | Path) -> Path | None:
    """The shipped copy of a repository-relative ``assets/...`` path (the demo configs' ``model.pretrained``),
    or None when ``path`` is not one."""
    parts = PurePath(path).parts
    if len(parts) < 2 or parts[0] != "assets":
        return None
    candidate = shipped_root().joinpath(*parts)
    return candidate if candidate.exists() else None


def first_comment(path: Path) -> str:
    """The first comment line of a YAML recipe, without its ``#`` (empty when it has none)."""
    for line in read_text(path).splitlines():
        if line.strip().startswith("#"):
            return line.strip().lstrip("#").strip()
        if line.strip():
            break
    return ""


def list_configs() -> list[tuple[str, str]]:
    """(name as ``--config`` takes it, first comment line) of every shipped recipe; pieces under ``strategy/``
    (added after a recipe) last."""
    root = config_dir()
    recipes = sorted(root.glob("*.yaml")) + sorted(root.glob("*/*.yaml"))
    return [(p.relative_to(root).as_posix(), first_comment(p)) for p in recipes]


def format_config_list() -> str:
    """``--list-configs``: one line per shipped recipe."""
    rows = list_configs()
    width = max((len(name) for name, _ in rows), default=0)
    lines = [f"recipes in {config_dir()} (--config NAME; a path to your own file wins over a name):"]
    lines += [f"  {name:<{width}}  {comment}" for name, comment in rows]
    return "\n".join(lines)
