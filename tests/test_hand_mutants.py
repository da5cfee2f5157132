"""The table of hand-written mutants (bench/hand_mutants.py) still matches the code: each mutant's old text is found
exactly once in its file, and each of its tests exists in the fast tier. A table that rots would report mutants as
killed that no longer exist; ``python bench/mutants.py --hand`` runs them (docs/mutation.md)."""

from __future__ import annotations

import ast
import importlib.util
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def load_table():
    spec = importlib.util.spec_from_file_location("hand_mutants", ROOT / "bench" / "hand_mutants.py")
    module = sys.modules[spec.name] = importlib.util.module_from_spec(spec)  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def fast_tests(path: Path) -> dict[str, bool]:
    """Test function name -> whether it is in the fast tier (not marked slow or distributed, nor its module)."""
    tree = ast.parse(path.read_text())
    marks = lambda node: {ast.unparse(d) for d in getattr(node, "decorator_list", [])}  # noqa: E731
    module_slow = any(isinstance(n, ast.Assign) and any(getattr(t, "id", "") == "pytestmark" for t in n.targets)
                      and re.search(r"mark\.(slow|distributed)", ast.unparse(n.value)) for n in tree.body)
    return {n.name: not module_slow and not any(re.search(r"mark\.(slow|distributed)$", m) for m in marks(n))
            for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("test")}


def test_every_hand_mutant_applies_once_and_names_fast_tests_that_exist():
    table = load_table()
    names = [m.name for m in table.HAND]
    assert len(names) == len(set(names)) >= 15
    for mutant in table.HAND:
        assert mutant.new != mutant.old and mutant.why and mutant.tests, mutant.name
        assert Path(mutant.file).parts[0] in ("sapiens2_ft", "datamodules"), mutant.name
        compile(table.mutated(ROOT, mutant), mutant.file, "exec")  # TableError when old is not found exactly once
        for node in mutant.tests:
            file, name = node.split("::")
            name = name.split("[")[0]
            assert fast_tests(ROOT / file).get(name), f"{mutant.name}: {node} is not a fast test of {file}"


def test_an_old_text_not_found_exactly_once_is_an_error(tmp_path):
    table = load_table()
    (tmp_path / "m.py").write_text("x = 1\nx = 1\n")
    for old in ("x = 2", "x = 1"):  # missing, twice
        with pytest.raises(table.TableError, match="found [02] times"):
            table.mutated(tmp_path, table.HandMutant("m", "m.py", old, "y", "why", ("t",)))
