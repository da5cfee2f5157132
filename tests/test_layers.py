"""The layers of docs/architecture.md: imports point down, never up, with no cycle, and the data layer stays light."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("datamodules", "sapiens2_ft")
# Module prefix -> layer (lowest first); the longest matching prefix decides. Every module must match one: each
# top-level module of sapiens2_ft is listed, so a new one fails here until it is given a layer.
LAYERS = {
    "datamodules": 0,  # data
    "sapiens2_ft.compat": 1,  # Lightning / torchmetrics internals, below everything of sapiens2_ft
    "sapiens2_ft.resources": 1,  # where the shipped configs/ and assets/ are (imports nothing of ours)
    "sapiens2_ft.models": 1,
    "sapiens2_ft.tasks": 2,
    "sapiens2_ft.training": 3,
    "sapiens2_ft.predict": 4,
    "sapiens2_ft.app": 4,
    "sapiens2_ft.convert": 4,
    "sapiens2_ft.detect": 4,
    "sapiens2_ft.export": 4,
    "sapiens2_ft.evaluate": 4,
    "sapiens2_ft.check_data": 4,
    "sapiens2_ft.write_shards": 4,
    "sapiens2_ft.memory": 4,
    "sapiens2_ft.console": 4,
    "sapiens2_ft.api": 4,
}
LAYER_NAMES = ("data", "models", "tasks", "training", "apps")
SHARED_TASK_MODULES = {"registry", "heads", "base", "dense_maps", "visualize",  # tasks/*.py: any task may use them
                       "sample_pictures", "sample_sheet", "diagnostics"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for package in PACKAGES for p in sorted((REPO / package).rglob("*.py"))}


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The project modules ``name`` imports anywhere in its file (function-level and TYPE_CHECKING imports too)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: up from the importing package
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parent + ([base] if base else []))
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        else:
            continue
        found.update(t for t in targets if t.split(".")[0] in PACKAGES)
    return found


PACKAGE_ROOT = ("sapiens2_ft", 4)  # the package's __init__ itself (the lazy Python API), matched exactly


def layer_of(name: str) -> int:
    if name == PACKAGE_ROOT[0]:
        return PACKAGE_ROOT[1]
    matches = [prefix for prefix in LAYERS if name == prefix or name.startswith(prefix + ".")]
    if not matches:
        raise AssertionError(f"{name} is in no layer; add it to LAYERS (and docs/architecture.md)")
    return LAYERS[max(matches, key=len)]


def graph() -> dict[str, set[str]]:
    found = modules()
    return {name: imports_of(name, path, set(found)) for name, path in found.items()}


def test_every_import_points_down():
    upward = [f"{a} ({LAYER_NAMES[layer_of(a)]}) imports {b} ({LAYER_NAMES[layer_of(b)]})"
              for a, targets in graph().items() for b in sorted(targets) if layer_of(b) > layer_of(a)]
    assert not upward, "upward imports:\n" + "\n".join(upward)


def test_task_folders_do_not_import_each_other():
    """A task's folder uses the shared task modules and lower layers, never another task's folder (multi-task
    pretraining, which builds every task, excepted)."""
    def folder(name: str) -> str | None:
        parts = name.split(".")
        return parts[2] if len(parts) > 3 and parts[:2] == ["sapiens2_ft", "tasks"] else None

    crossing = [f"{a} imports {b}" for a, targets in graph().items() for b in sorted(targets)
                if folder(a) and folder(b) and folder(a) != folder(b) and folder(a) != "multitask"]
    assert not crossing, "\n".join(crossing)
    from sapiens2_ft.tasks.registry import TASKS

    shared = {name.split(".")[2] for name in modules()
              if name.count(".") == 2 and name.startswith("sapiens2_ft.tasks.")}
    assert shared <= SHARED_TASK_MODULES | set(TASKS), shared  # a folder that is no registered task is a shared one


def test_no_import_cycles():
    edges = graph()
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    cycles = []

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                cycles.append(" -> ".join(path[path.index(nxt):] + [nxt]))
            elif nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = 2

    for start in sorted(edges):
        if start not in state:
            visit(start, [start])
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def test_the_graph_sees_imports():
    """The checks above would pass on an empty graph: make sure the parser finds real edges of each kind."""
    edges = graph()
    assert "sapiens2_ft.tasks.registry" in edges["sapiens2_ft.tasks.base"]
    assert "datamodules.dense.targets.spec" in edges["datamodules.dense.targets.seg"]  # absolute
    assert "datamodules.synthetic.generate" in edges["datamodules.synthetic"]  # relative, from a package
    assert "datamodules.synthetic" in edges["datamodules.synthetic_data"]  # inside a function
    assert layer_of("sapiens2_ft.training.cli") == 3 and layer_of("sapiens2_ft.compat") == 1
    assert layer_of("sapiens2_ft") == 4


def test_a_new_top_level_module_is_in_no_layer():
    """``layer_of`` has no catch-all: a module nobody placed is an error naming it."""
    with pytest.raises(AssertionError, match="sapiens2_ft.newthing is in no layer"):
        layer_of("sapiens2_ft.newthing")
    assert {name.split(".")[1] for name in modules() if name.count(".") >= 1 and name.startswith("sapiens2_ft.")} \
        == {prefix.split(".")[1] for prefix in LAYERS if prefix.startswith("sapiens2_ft.")}


def test_data_layer_loads_no_model_code():
    """Importing each data module (one after the other, in a fresh process) loads neither this project's model
    code nor transformers' modeling code (Lightning itself imports transformers' configuration utilities; those
    are allowed). The first module that does is named."""
    names = sorted(name for name in modules() if name.startswith("datamodules") and not name.endswith("__main__"))
    code = f"""
import importlib, sys
for name in {names!r}:
    importlib.import_module(name)
    bad = sorted(m for m in sys.modules if m.startswith(("sapiens2_ft", "transformers.models.sapiens2"))
                 or m == "transformers.modeling_utils")
    if bad:
        print(name, "loads", bad[:5])
        break
else:
    print("ok", len({names!r}))
"""
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert result.stdout.strip() == f"ok {len(names)}", result.stdout
