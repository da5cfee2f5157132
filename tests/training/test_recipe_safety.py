"""A recipe from someone else imports and calls nothing outside the allowed modules and functions: its class
paths and function values are checked as strings before the parser imports anything, under ``check_data``,
``train`` and ``evaluate`` alike; values the first check cannot see (a class path given as a plain string, the
command line) meet the parser's import policy and the check of the parsed recipe."""

from __future__ import annotations

import sys

import pytest
import yaml

from sapiens2_ft import check_data, evaluate
from sapiens2_ft.training import cli
from sapiens2_ft.training.config_safety import check_parsed_recipe, recipe_problems

CALLBACKS = "trainer.callbacks"


@pytest.fixture
def beside(tmp_path, monkeypatch):
    """A folder holding a recipe and a module whose import writes a file, importable (on sys.path, the current
    directory), as when a downloaded recipe comes with its own Python file."""
    (tmp_path / "evilmod.py").write_text(
        f"open({str(tmp_path / 'imported')!r}, 'w').close()\n"
        "from lightning.pytorch.callbacks import Callback\n\nclass CB(Callback):\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SAPIENS2_FT_ALLOW_CLASSES", raising=False)
    yield tmp_path
    assert not (tmp_path / "imported").exists() and "evilmod" not in sys.modules


def recipe(folder, trainer: dict) -> str:
    path = folder / "recipe.yaml"
    path.write_text(yaml.safe_dump({"trainer": trainer}))
    return str(path)


@pytest.mark.parametrize("command", ["check_data", "train", "evaluate"])
def test_a_module_beside_the_recipe_is_not_imported(beside, command):
    args = ["--config", "pose_demo.yaml", "--config", recipe(beside, {"callbacks": [{"class_path": "evilmod.CB"}]}),
            "--run_dir", str(beside / "run")]
    run = {"check_data": check_data.main, "train": cli.main,
           "evaluate": lambda a: evaluate.main(["--model", "m", "--data.input_size", "[256, 192]", *a])}[command]
    with pytest.raises(SystemExit, match=r"recipe\.yaml names code it may not run: trainer\.callbacks\[0\]: "
                                         r"evilmod\.CB \(a class outside the allowed modules"):
        run(args)
    assert not (beside / "run").exists()


def test_a_class_path_as_a_plain_string_meets_the_import_policy(beside, capsys):
    with pytest.raises(SystemExit):
        cli.main(["--config", "pose_demo.yaml", "--config", recipe(beside, {"callbacks": ["evilmod.CB"]})])
    assert "Importing 'evilmod.CB' is not allowed" in capsys.readouterr().err


def test_functions_from_a_recipe_are_refused_unless_listed(beside):
    hooks = {"class_path": "lightning.pytorch.callbacks.LambdaCallback",
             "init_args": {"on_train_start": "builtins.print"}}
    with pytest.raises(SystemExit, match=r"trainer\.callbacks\[0\]\.init_args\.on_train_start: builtins\.print "
                                         r"\(a function; allowed: lightning\.pytorch\.callbacks\.finetuning"):
        cli.main(["--config", "pose_demo.yaml", "--config", recipe(beside, {"callbacks": [hooks]})])
    # a function of an allowed module, from the command line: the parsed recipe is refused before anything runs
    hooks["init_args"]["on_train_start"] = "sapiens2_ft.training.run_dir.claim"
    with pytest.raises(SystemExit, match=r"functions off the allowed list .*on_train_start: "
                                         r"sapiens2_ft\.training\.run_dir\.claim"):
        cli.main(["--config", "pose_demo.yaml", "--trainer.callbacks", yaml.safe_dump(hooks, default_flow_style=True),
                  "--run_dir", str(beside / "run")])
    assert not (beside / "run").exists()
    finetuning = {"class_path": "lightning.pytorch.callbacks.BackboneFinetuning",
                  "init_args": {"lambda_func": "lightning.pytorch.callbacks.finetuning.multiplicative"}}
    assert recipe_problems({"trainer": {"callbacks": [finetuning]}}) == []  # on the list
    from lightning.pytorch.callbacks.finetuning import multiplicative

    check_parsed_recipe({"trainer": {"callbacks": [{"init_args": {"lambda_func": multiplicative}}]}})


def test_a_yaml_tag_is_a_message(tmp_path):
    tagged = tmp_path / "tagged.yaml"
    tagged.write_text("task: pose\ntrainer: !!python/object/apply:os.system ['true']\n")
    with pytest.raises(SystemExit, match=r"tagged\.yaml: not a plain YAML recipe \(could not determine a constructor "
                                         r"for the tag 'tag:yaml.org,2002:python/object/apply:os.system'"):
        check_data.main(["--config", str(tagged)])
