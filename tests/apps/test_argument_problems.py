"""Every command names all the problems of its arguments in one message (``sapiens2_ft/problems.py``), before it
loads a model or reads a file, as ``train.py`` does for a config."""

from __future__ import annotations

import pytest

from datamodules.errors import BadInput
from sapiens2_ft import evaluate, export, memory, predict
from sapiens2_ft.convert.__main__ import main as convert
from sapiens2_ft.problems import ArgumentProblems, Problems


def message(command, argv: list[str]) -> str:
    with pytest.raises(SystemExit) as err:
        command(argv)
    return str(err.value.code)


def test_predict_names_every_bad_argument_at_once(tmp_path):
    text = message(predict.main, ["--model", str(tmp_path / "missing_model"), "--input", str(tmp_path / "no_images"),
                                  "--out", str(tmp_path / "out"), "--det_threshold", "2.0", "--batch_size", "0"])
    assert text.startswith("4 problems in the arguments:\n")
    for problem in (f"--model: '{tmp_path / 'missing_model'}' does not exist",
                    f"--input: '{tmp_path / 'no_images'}' does not exist",
                    "--det_threshold: the minimum person score is between 0 and 1, got 2.0",
                    "--batch_size: give at least 1 image per forward pass, got 0"):
        assert f"\n  - {problem}" in text, text
    assert not (tmp_path / "out").exists()  # nothing was made before the arguments were checked


def test_one_problem_is_its_own_line(tmp_path):
    (tmp_path / "images").mkdir()
    assert message(predict.main, ["--model", str(tmp_path / "m"), "--input", str(tmp_path / "images"), "--out",
                                  str(tmp_path / "o")]) == (f"--model: '{tmp_path / 'm'}' does not exist (expected an "
                                                            f"exported directory, a .ckpt, a distributed checkpoint "
                                                            f"directory or a hub id 'user/name')")


def test_the_other_commands_collect_theirs(tmp_path, capsys):
    text = message(evaluate.main, ["--model", str(tmp_path / "m"), "--boxes", "b.json", "--detector", "d",
                                   "--det_threshold", "-1"])
    assert text.startswith("5 problems") and "--config: give the recipe" in text and "give one of --boxes and " \
        "--detector" in text and "--boxes: 'b.json' is not a file" in text and "--det_threshold" in text
    text = message(export.main, ["--checkpoint", str(tmp_path / "none.ckpt"), "--private"])
    assert text.startswith("3 problems") and "--private is for --push_to_hub" in text and "does not exist" in text \
        and "--out: give the output directory" in text
    text = message(memory.main, ["--world_size", "0", "--device_memory_gb", "0", "--config", "no_such.yaml"])
    assert text.startswith("3 problems") and "--world_size" in text and "--device_memory_gb" in text \
        and "config 'no_such.yaml' not found" in text
    assert convert(["labelme", str(tmp_path / "nowhere"), "--out", str(tmp_path / "out"), "--val_fraction", "1.5",
                    "--keypoints", "no_such_set", "--rename", "nose"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: 4 problems in the arguments:") and "not a folder" in err and "--val_fraction 1.5" \
        in err and "no_such_set" in err and "--rename 'nose': expected OLD=NEW" in err


def test_problems_collects_and_raises_only_when_there_is_one():
    problems = Problems()
    assert problems.check(True, "never") and not problems.check(False, "--a: wrong")
    with pytest.raises(ArgumentProblems, match=r"^--a: wrong$"):
        problems.raise_any()
    problems.append("--b: wrong too")
    with pytest.raises(BadInput, match=r"^2 problems in the arguments:\n  - --a: wrong\n  - --b: wrong too$") as err:
        problems.raise_any()
    assert err.value.problems == ["--a: wrong", "--b: wrong too"]
    Problems().raise_any()  # none: nothing happens
