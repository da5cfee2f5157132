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
    "datamodules.boundary": 0,  # every file, folder and URL a user is handed is read (and named folders written) here
    "datamodules.errors": 0,  # the data errors, which the boundary raises
    "datamodules": 1,  # data
    "sapiens2_ft.compat": 2,  # Lightning / torchmetrics internals, below everything of sapiens2_ft
    "sapiens2_ft.resources": 2,  # where the shipped configs/ and assets/ are (reads them through the boundary)
    "sapiens2_ft.problems": 2,  # every problem of a command's arguments in one error (imports only the errors)
    "sapiens2_ft.exits": 2,  # the console entry points' edge: an error becomes its message and exit status
    "sapiens2_ft.models": 2,
    "sapiens2_ft.tasks": 3,
    "sapiens2_ft.training": 4,
    "sapiens2_ft.predict": 5,
    "sapiens2_ft.app": 5,
    "sapiens2_ft.serve": 5,
    "sapiens2_ft.convert": 5,
    "sapiens2_ft.labelling": 5,  # pre-annotations for the labelling tools, and which images to label next
    "sapiens2_ft.detect": 5,
    "sapiens2_ft.export": 5,
    "sapiens2_ft.evaluate": 5,
    "sapiens2_ft.check_data": 5,
    "sapiens2_ft.write_shards": 5,
    "sapiens2_ft.memory": 5,
    "sapiens2_ft.pseudo_labels": 5,
    "sapiens2_ft.console": 5,
    "sapiens2_ft.api": 5,
}
LAYER_NAMES = ("boundary", "data", "models", "tasks", "training", "apps")
SHARED_TASK_MODULES = {"registry", "heads", "base", "dense_maps", "visualize",  # tasks/*.py: any task may use them
                       "sample_pictures", "sample_sheet", "diagnostics", "inference", "saved_model", "spec",
                       "task_model", "dense_data", "distill"}


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


PACKAGE_ROOT = ("sapiens2_ft", 5)  # the package's __init__ itself (the lazy Python API), matched exactly


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


def cycles(edges: dict[str, set[str]]) -> list[str]:
    """Each import loop of a graph (node -> the nodes it imports), as ``a -> b -> a``."""
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    found = []

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                found.append(" -> ".join(path[path.index(nxt):] + [nxt]))
            elif nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = 2

    for start in sorted(edges):
        if start not in state:
            visit(start, [start])
    return found


def test_no_import_cycles():
    found = cycles(graph())
    assert not found, "import cycles:\n" + "\n".join(found)


def task_rooms(edges: dict[str, set[str]]) -> dict[str, set[str]]:
    """The import graph of ``sapiens2_ft/tasks/`` between its rooms: each task folder and each shared module is one
    node (``tasks.seg`` for everything in ``tasks/seg/``); imports inside a room are left out."""
    def room(name: str) -> str | None:
        parts = name.split(".")
        return ".".join(parts[:3]) if len(parts) >= 3 and parts[:2] == ["sapiens2_ft", "tasks"] else None

    rooms: dict[str, set[str]] = {}
    for a, targets in edges.items():
        if room(a):
            rooms.setdefault(room(a), set()).update(room(b) for b in targets if room(b) and room(b) != room(a))
    return rooms


def test_no_loops_between_the_rooms_of_tasks():
    """No loop between task folders and the shared modules of ``tasks/`` (a module-level check misses one that runs
    through two modules of one folder, such as registry -> seg/spec and seg/module -> base -> registry): the
    registry sits above the task folders, which import only the shared modules below them."""
    found = cycles(task_rooms(graph()))
    assert not found, "loops between the rooms of tasks/:\n" + "\n".join(found)


def test_the_room_check_sees_a_loop_through_two_modules_of_a_folder():
    edges = {"sapiens2_ft.tasks.registry": {"sapiens2_ft.tasks.seg.spec"},
             "sapiens2_ft.tasks.seg.module": {"sapiens2_ft.tasks.base"},
             "sapiens2_ft.tasks.base": {"sapiens2_ft.tasks.registry"}}
    assert not cycles(edges)  # no loop between modules
    assert cycles(task_rooms(edges)) == ["sapiens2_ft.tasks.base -> sapiens2_ft.tasks.registry -> "
                                         "sapiens2_ft.tasks.seg -> sapiens2_ft.tasks.base"]
    rooms = task_rooms(graph())
    assert "sapiens2_ft.tasks.seg" in rooms["sapiens2_ft.tasks.registry"]  # the registry lists the task folders
    assert "sapiens2_ft.tasks.registry" not in rooms["sapiens2_ft.tasks.base"]


def test_the_graph_sees_imports():
    """The checks above would pass on an empty graph: make sure the parser finds real edges of each kind."""
    edges = graph()
    assert "sapiens2_ft.tasks.spec" in edges["sapiens2_ft.tasks.base"]
    assert "datamodules.dense.target_spec" in edges["sapiens2_ft.tasks.seg.targets"]  # absolute
    assert "datamodules.synthetic.generate" in edges["datamodules.synthetic"]  # relative, from a package
    assert "datamodules.synthetic" in edges["datamodules.synthetic_data"]  # inside a function
    assert layer_of("sapiens2_ft.training.cli") == 4 and layer_of("sapiens2_ft.compat") == 2
    assert layer_of("sapiens2_ft") == 5 and layer_of("datamodules.boundary.images") == 0
    assert "datamodules.boundary.limits" in edges["datamodules.boundary.images"]


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


TRAINING_STACK = ("lightning", "wandb", "pycocotools", "torchmetrics")


def test_a_saved_model_predicts_without_the_training_stack(tiny_pose308_dir, tmp_path):
    """``sapiens2_ft.load(export).predict(images)``, a person-box task and a whole-image one, in a fresh process,
    imports none of Lightning, wandb, pycocotools and torchmetrics (the inference objects of tasks/inference.py)."""
    from conftest import tiny_pose_config
    from transformers import Sapiens2ForSemanticSegmentation

    seg = Sapiens2ForSemanticSegmentation(tiny_pose_config(29))
    seg.config.architectures = [type(seg).__name__]
    seg.save_pretrained(tmp_path / "seg")
    code = f"""
import sys
import numpy as np
import sapiens2_ft
image = np.zeros((64, 48, 3), np.uint8)
pose = sapiens2_ft.load({str(tiny_pose308_dir)!r}, device="cpu").predict([image], boxes="whole_image")
seg = sapiens2_ft.load({str(tmp_path / "seg")!r}, device="cpu").predict([image])
assert pose[0].people.keypoints.shape == (1, 308, 2) and seg[0].files[".png"].shape == (64, 48)
print(sorted({{name.split(".")[0] for name in sys.modules}} & {set(TRAINING_STACK)!r}))
"""
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().splitlines()[-1] == "[]", result.stdout
