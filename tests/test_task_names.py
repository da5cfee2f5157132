"""No task-name literals outside the task registry and the task folders: what the apps and the training layer
need of a task comes from its ``TaskSpec`` or its module's hooks (docs/architecture.md, "nothing else lists
tasks"). A literal such as ``task == "seg"`` or ``results["matting"]`` is how a five-way if-chain starts."""

from __future__ import annotations

import ast
from pathlib import Path

from sapiens2_ft.tasks.registry import TASKS

REPO = Path(__file__).resolve().parents[1]
ALLOWED = ("sapiens2_ft/tasks/registry.py",)  # and every task folder, sapiens2_ft/tasks/<task>/


def docstrings(tree: ast.AST) -> set[int]:
    return {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and node.body and isinstance(node.body[0], ast.Expr)}


def task_literals(source: str, names=frozenset(TASKS)) -> list[tuple[int, str]]:
    """(line, name) of each string constant equal to a task name, docstrings left out (f-string text is not a
    constant of its own and is not matched)."""
    tree = ast.parse(source)
    skip = docstrings(tree)
    return sorted((node.lineno, node.value) for node in ast.walk(tree)
                  if isinstance(node, ast.Constant) and node.value in names and id(node) not in skip)


def checked_files() -> list[Path]:
    """Every module of the package but the registry and the task folders."""
    def allowed(rel: str) -> bool:
        parts = rel.split("/")
        return rel in ALLOWED or (parts[:2] == ["sapiens2_ft", "tasks"] and len(parts) > 3)

    return [p for p in sorted((REPO / "sapiens2_ft").rglob("*.py")) if not allowed(p.relative_to(REPO).as_posix())]


def test_no_task_name_literals_outside_the_registry_and_the_task_folders():
    found = [f"{p.relative_to(REPO)}:{line}: '{name}'" for p in checked_files()
             for line, name in task_literals(p.read_text())]
    assert not found, ("task names used as literals (give the TaskSpec or the module a hook instead):\n"
                       + "\n".join(found))


def test_the_check_sees_branches_and_spares_prose():
    """The check above passes on code without literals; make sure it would see one of each kind."""
    code = '''"""Docstrings may name the seg task."""
def f(task, results, module):
    """And pose here."""
    if task == "pose":
        return results["matting"]
    for name in ("normal", "pointmap"):
        pass
    return f"{task} is not seg", {"multitask": 1}
'''
    assert task_literals(code) == [(4, "pose"), (5, "matting"), (6, "normal"), (6, "pointmap"), (8, "multitask")]
    assert len(checked_files()) > 40 and REPO / "sapiens2_ft" / "predict" / "sheet.py" in checked_files()
