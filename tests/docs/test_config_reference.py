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


METRIC = r"(?:AP|AP50|AP75|AR|AR50|mIoU|mAcc|aAcc|PCK|SAD|MSE|RMSE|MAE|L2|loss|(?:pixel )?accuracy)"
MEASUREMENT = re.compile(rf"\b{METRIC}\b\s*[=:]?\s*[-+]?\d*\.?\d+|(?<![\w.+-])[-+]?\d+(?:\.\d+)?\s*%?\s+{METRIC}\b"
                         rf"|\bruns? \d+\b")


def measurements(text: str) -> list[str]:
    """The figures a YAML text's comments give: a metric and its value ("AP 0.41", "mIoU 0.336", "+29% AP") or a
    run of a history ("run 6")."""
    return [m.group(0) for line in text.splitlines() if "#" in line
            for m in MEASUREMENT.finditer(line.split("#", 1)[1])]


def test_recipes_state_choices_and_leave_the_numbers_to_the_docs():
    """A recipe's comments say what it does and why; what was measured lives in the docs, where it is re-measured."""
    assert measurements("lr: 1.0e-4  # seeds 0-2: AP 0.410 / 0.422, mIoU 0.336; measured +29% AP in run 6") == [
        "AP 0.410", "mIoU 0.336", "+29% AP", "run 6"]
    assert measurements("sigma: 2.0  # AP is scored at 0.5 OKS  \nloss: mse  # 10 x the heatmap MSE") == []
    found = {recipe.relative_to(ROOT / "configs").as_posix(): measurements(recipe.read_text())
             for recipe in sorted((ROOT / "configs").rglob("*.yaml"))}
    assert not {name: figures for name, figures in found.items() if figures}
