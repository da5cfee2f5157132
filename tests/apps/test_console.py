"""The ``sapiens2-ft`` console command and the shipped recipes: dispatch to each entry point, ``--help`` without
loading the stack, ``--list-configs``, and config / backbone names resolved from any folder (a user's file wins)."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from datamodules.errors import NotFound
from sapiens2_ft import console, resources
from sapiens2_ft.models.factory import resolve_pretrained
from sapiens2_ft.training.cli import CONFIG_DIR, main as train_main, resolve_config_args

REPO = Path(__file__).resolve().parents[2]
ENTRY_POINTS = {"train": "sapiens2_ft.training.cli", "predict": "sapiens2_ft.predict.cli",
                "evaluate": "sapiens2_ft.evaluate", "export": "sapiens2_ft.export", "check-data": "sapiens2_ft.check_data",
                "write-shards": "sapiens2_ft.write_shards", "memory": "sapiens2_ft.memory",
                "detect": "sapiens2_ft.detect", "convert": "sapiens2_ft.convert.__main__",
                "pseudo-labels": "sapiens2_ft.pseudo_labels",
                "select": "sapiens2_ft.labelling.select", "label-config": "sapiens2_ft.labelling.config",
                "app": "sapiens2_ft.app.cli", "serve": "sapiens2_ft.serve.cli"}


def test_help_lists_every_command_without_loading_the_stack():
    code = ("import sys; from sapiens2_ft.console import main; status = main(['--help']); "
            "print('loaded:', sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'lightning', "
            "'transformers') or m.startswith('sapiens2_ft.') and m not in ('sapiens2_ft.console', "
            "'sapiens2_ft.exits'))); "  # the edge: a message and an exit status for an error (tests/test_exits.py)
            "print('status:', status)")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True).stdout
    assert "loaded: []" in out and "status: 0" in out
    lines = {line.split()[0]: line for line in out.splitlines() if line.startswith("  ")}
    assert list(lines) == list(console.COMMANDS) == list(ENTRY_POINTS)
    assert all(len(line.split()) > 3 for line in lines.values())  # a summary on the same line


@pytest.mark.parametrize("name", list(ENTRY_POINTS))
def test_each_command_forwards_its_arguments_unchanged(name, monkeypatch):
    module = importlib.import_module(ENTRY_POINTS[name])
    seen = []
    monkeypatch.setattr(module, "main", lambda argv: seen.append(argv) or 3)
    args = ["--config", "pose_demo.yaml", "--trainer.max_steps", "2", "--a=b"]
    assert console.main([name, *args]) == 3  # an int from the entry point is the exit status
    assert seen == [args]


def test_exit_status_of_commands_returning_results(monkeypatch):
    from sapiens2_ft import export

    monkeypatch.setattr(export, "main", lambda argv: Path("out"))
    assert console.main(["export", "--checkpoint", "x", "--out", "out"]) == 0
    monkeypatch.setattr(export, "main", lambda argv: {"metrics": {}})
    assert console.main(["export"]) == 0


def test_unknown_and_missing_commands(monkeypatch, capsys):
    assert console.main(["trian"]) == 2
    assert "unknown command 'trian'" in capsys.readouterr().err
    assert console.main([]) == 2
    monkeypatch.setitem(console.COMMANDS, "convert", console.Command(("sapiens2_ft.not_installed",), "x"))
    with pytest.raises(SystemExit, match="sapiens2-ft convert: not available .* sapiens2_ft.not_installed"):
        console.main(["convert", "labelme", "src"])


def test_list_configs(capsys):
    assert console.main(["train", "--list-configs"]) == 0
    listing = capsys.readouterr().out
    assert train_main(["--list-configs"]) is None  # python train.py --list-configs prints the same, status 0
    assert capsys.readouterr().out == listing
    rows = {line.split()[0]: (line.split(None, 1) + [""])[1] for line in listing.splitlines()[1:]}
    expected = sorted(p.name for p in CONFIG_DIR.glob("*.yaml")) + sorted(
        f"strategy/{p.name}" for p in (CONFIG_DIR / "strategy").glob("*.yaml"))
    assert list(rows) == expected
    header = (CONFIG_DIR / "pose_demo.yaml").read_text().splitlines()[0].lstrip("# ")
    assert rows["pose_demo.yaml"] == header


def test_config_names_resolve_from_another_folder_and_a_users_file_wins(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert resolve_config_args(["--config", "pose_demo.yaml"]) == ["--config", str(CONFIG_DIR / "pose_demo.yaml")]
    assert resolve_config_args(["--config=strategy/ddp"]) == [f"--config={CONFIG_DIR / 'strategy' / 'ddp.yaml'}"]
    (tmp_path / "pose_demo.yaml").write_text("task: pose\n")
    assert resolve_config_args(["--config", "pose_demo.yaml"]) == ["--config", "pose_demo.yaml"]
    with pytest.raises(NotFound, match="config 'nope.yaml' not found"):
        resolve_config_args(["--config", "nope.yaml"])


def test_demo_backbone_resolves_from_another_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    shipped = REPO / "assets" / "sapiens2-mini-synthetic"
    assert Path(resolve_pretrained("assets/sapiens2-mini-synthetic")) == shipped
    (tmp_path / "assets" / "sapiens2-mini-synthetic").mkdir(parents=True)  # the user's own folder wins
    assert resolve_pretrained("assets/sapiens2-mini-synthetic") == "assets/sapiens2-mini-synthetic"


def test_an_installed_package_reads_its_own_copies(tmp_path, monkeypatch):
    """In a wheel, ``sapiens2_ft/_shipped/`` (written by setup.py) holds the recipes and the backbone."""
    shipped = tmp_path / "_shipped"
    (shipped / "configs").mkdir(parents=True)
    (shipped / "configs" / "mine.yaml").write_text("# My recipe.\ntask: seg\n")
    (shipped / "assets" / "backbone").mkdir(parents=True)
    monkeypatch.setattr(resources, "SHIPPED_DIR", shipped)
    assert resources.config_dir() == shipped / "configs"
    assert resources.list_configs() == [("mine.yaml", "My recipe.")]
    assert resources.shipped_asset("assets/backbone") == shipped / "assets" / "backbone"
    assert resources.shipped_asset("assets/other") is None and resources.shipped_asset("facebook/x") is None


@pytest.mark.parametrize("name", ["check_data", "write_shards"])
def test_the_commands_that_read_a_recipe_have_a_short_help(name, capsys):
    """issue 60: their --help was train.py's whole parser (976 and 982 lines, write_shards' own --out buried in it)."""
    module = importlib.import_module(f"sapiens2_ft.{name}")
    with pytest.raises(SystemExit) as err:
        module.main(["--config", "pose_custom.yaml", "--help"])
    assert err.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: python -m sapiens2_ft.{name}") and len(out.splitlines()) <= 30, out
    for flags, _ in module.OPTIONS:
        assert flags[0] in out, flags
    assert "--config RECIPE" in out and "`python train.py --config RECIPE --help` lists every key" in out
