"""docs/configs.md is generated from the parser train.py builds; it must match the code."""

from __future__ import annotations

import re
from pathlib import Path

from tool_scripts import load_tool

ROOT = Path(__file__).resolve().parents[2]


def test_config_reference_is_up_to_date():
    tool = load_tool("config_reference")
    page = (ROOT / "docs" / "configs.md").read_text()
    assert page == tool.render(), "docs/configs.md is stale: run python tools/config_reference.py"


def test_every_recipe_key_is_documented():
    """Each model.* / data.* key a shipped recipe sets has a row (a key missing from the parser would not parse)."""
    import yaml

    page = (ROOT / "docs" / "configs.md").read_text()

    def keys(tree, prefix=""):
        for name, value in tree.items():
            if isinstance(value, dict) and name not in ("head", "loss_weights", "task_weights", "init_args"):
                yield from keys(value, f"{prefix}{name}.")
            else:
                yield f"{prefix}{name}"

    for recipe in sorted((ROOT / "configs").glob("*.yaml")):
        config = yaml.safe_load(recipe.read_text()) or {}
        for key in keys({k: v for k, v in config.items() if k in ("model", "data")}):
            assert f"| `{key}` |" in page, f"{recipe.name}: {key} is not in docs/configs.md"


def test_every_recipe_header_says_how_to_run_it():
    """Each recipe's leading comments give its run command, its hardware and the keys a user is expected to
    change, and each such key is a documented one (docs/configs.md, or a trainer key)."""
    page = (ROOT / "docs" / "configs.md").read_text()
    for recipe in sorted((ROOT / "configs").glob("*.yaml")):
        header = []
        for line in recipe.read_text().splitlines():
            if not line.startswith("#"):
                break
            header.append(line)
        text = "\n".join(header)
        assert f"--config {recipe.name}" in text or "python tools/" in text, f"{recipe.name}: no run command"
        assert "Hardware:" in text, f"{recipe.name}: no hardware line"
        change = [line for line in header if line.startswith("# Change:")]
        assert change, f"{recipe.name}: no 'Change:' line"
        for key in re.findall(r"\b((?:model|data|trainer)\.[a-z_.]+[a-z_])", change[0]):
            assert key.startswith("trainer.") or f"| `{key}` |" in page, f"{recipe.name}: {key} is not a known key"
