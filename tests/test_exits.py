"""The library raises exceptions (``datamodules/errors.py``); only the console entry points end the process, through
``sapiens2_ft/exits.py``. A ``raise SystemExit``, an ``except SystemExit`` or a ``sys.exit()`` anywhere else under
``sapiens2_ft/`` or ``datamodules/`` fails here (an ``if __name__ == "__main__":`` block may ``sys.exit(main())``)."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

from datamodules.errors import (BadConfig, BadInput, DataError, NotFound, Refused, RefusedInput, Sapiens2FTError,
                                restated)
from sapiens2_ft.console import COMMANDS
from sapiens2_ft.exits import console_command

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("datamodules", "sapiens2_ft")
EDGE = "sapiens2_ft/exits.py"  # the one place an error becomes an exit status
EXITS = {("sys", "exit"), ("os", "_exit")}
ENTRY_MODULES = ("sapiens2_ft.console", "sapiens2_ft.predict")  # sapiens2-ft, python -m sapiens2_ft.predict


def main_guards(tree: ast.AST) -> set[int]:
    """The ids of the nodes inside ``if __name__ == "__main__":`` blocks."""
    inside = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Compare) and \
                isinstance(node.test.left, ast.Name) and node.test.left.id == "__name__":
            inside |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    return inside


def exits(path: Path) -> list[tuple[str, int]]:
    """(what, line) of each place in the module that ends the process or turns an error into an exit: the name
    ``SystemExit`` (raised, caught or called), ``sys.exit`` / ``os._exit`` / ``exit`` / ``quit`` calls outside
    ``__main__`` blocks."""
    tree = ast.parse(path.read_text())
    guarded = main_guards(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id == "SystemExit":
            found.append(("SystemExit", node.lineno))
        elif isinstance(node, ast.Call) and id(node) not in guarded:
            func = node.func
            if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and \
                    (func.value.id, func.attr) in EXITS:
                found.append((f"{func.value.id}.{func.attr}", node.lineno))
            elif isinstance(func, ast.Name) and func.id in ("exit", "quit"):
                found.append((func.id, node.lineno))
    return found


def modules() -> dict[str, Path]:
    return {p.relative_to(REPO).as_posix(): p for package in PACKAGES for p in sorted((REPO / package).rglob("*.py"))}


def test_only_the_edge_ends_the_process():
    found = [f"{name}:{line}: {what}" for name, path in modules().items() if name != EDGE
             for what, line in exits(path)]
    assert not found, ("raise an error of datamodules/errors.py instead (the console entry points turn it into "
                       "a message and an exit status, sapiens2_ft/exits.py):\n" + "\n".join(found))


def test_the_scan_sees_each_way_out(tmp_path):
    """The check above would pass on a scan that finds nothing: it finds each kind, and spares ``__main__``."""
    probe = tmp_path / "probe.py"
    probe.write_text("import os, sys\ndef f():\n    raise SystemExit('x')\ntry:\n    f()\nexcept SystemExit:\n"
                     "    sys.exit(1)\nos._exit(2)\nexit()\nif __name__ == '__main__':\n    sys.exit(f())\n")
    assert sorted(exits(probe), key=lambda found: found[1]) == [
        ("SystemExit", 3), ("SystemExit", 6), ("sys.exit", 7), ("os._exit", 8), ("exit", 9)]
    assert {what for what, _ in exits(REPO / EDGE)} == {"SystemExit"}  # the edge itself is where it happens


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_console_command_ends_on_errors_at_the_edge(command):
    """Each ``sapiens2-ft COMMAND`` (and ``python -m sapiens2_ft.X``, ``train.py``) runs a ``main`` wrapped by
    ``console_command``: an error of the library becomes its message and an exit status, nowhere else."""
    main = importlib.import_module(COMMANDS[command].modules[0]).main
    assert getattr(main, "__wrapped__", None) is not None, f"{command}: main is not wrapped by console_command"
    for name in ENTRY_MODULES:
        assert getattr(importlib.import_module(name).main, "__wrapped__", None) is not None, name


def test_an_error_becomes_its_message_and_exit_status():
    @console_command
    def main(argv):
        raise argv

    with pytest.raises(SystemExit) as done:
        main(NotFound("--model: 'm' does not exist"))
    assert done.value.code == "--model: 'm' does not exist"  # printed to stderr, exit status 1
    stopped = Sapiens2FTError("preempted")
    stopped.exit_code = 75
    with pytest.raises(SystemExit) as done:
        main(stopped)
    assert done.value.code == 75
    with pytest.raises(KeyError):  # not one of ours: a bug, its traceback kept
        main(KeyError("x"))


def test_the_kinds_keep_the_builtin_errors_they_were():
    """``except ValueError`` / ``except FileNotFoundError`` written against earlier releases still catch them."""
    assert issubclass(BadInput, ValueError) and issubclass(BadConfig, ValueError)
    assert issubclass(NotFound, FileNotFoundError) and issubclass(DataError, BadInput)
    assert issubclass(RefusedInput, DataError) and issubclass(RefusedInput, Refused)
    assert all(issubclass(kind, Sapiens2FTError) for kind in (BadInput, BadConfig, NotFound, Refused))
    error = RefusedInput("a.png is a link")
    assert restated(error, f"--input {error}") is error and str(error) == "--input a.png is a link"
    other = restated(KeyError("k"), "evaluate: k", NotFound)
    assert type(other) is NotFound and str(other) == "evaluate: k"
