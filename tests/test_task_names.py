"""No task-name literals outside the task registry and the task folders: what the apps and the training layer
need of a task comes from its ``TaskSpec`` or its inference object's declared capabilities (docs/architecture.md,
"nothing else lists tasks"). A literal such as ``task == "seg"`` or ``results["matting"]`` is how a five-way
if-chain starts; so are its proxies: ``spec.model.label_arg == "keypoints"`` (a registry field compared with a literal),
``callable(getattr(module, "with_focal", None))`` (a capability guessed from a task class's member) and
``type(module).people is not TaskModule.people`` (method identity).

The data layer (``datamodules/``) names no task at all: it is handed a task's target spec and the rules of its maps,
so a new task never edits it. Its few literals that equal a task name are values of a file format or of a config,
listed in ``DATA_LAYER_VALUES``, each allowed once in its file."""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

from sapiens2_ft.tasks.base import RunModule, TaskModule
from sapiens2_ft.tasks.registry import TASKS

REPO = Path(__file__).resolve().parents[1]
ALLOWED = ("sapiens2_ft/tasks/registry.py",)  # and every task folder, sapiens2_ft/tasks/<task>/
SPEC_KINDS = {"predictor", "label_arg", "label_kind", "model_class"}  # TaskSpec fields that tell tasks apart
# (file, literal) -> why: the data layer's values that equal a task's name but name none.
DATA_LAYER_VALUES = {
    ("datamodules/dense/pipelines.py", "seg"): "upstream's segmentation recipe, a data.augment.pipeline value",
    ("datamodules/shards/index.py", "pose"): "the kind of a shard index of person crops, a value of index.json",
    ("datamodules/synthetic/writer.py", "albedo"): "a folder of the synthetic dataset on disk",
    ("datamodules/synthetic/generate.py", "albedo"): "that folder's entry in the synthetic dataset.json",
}


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


def data_layer_literals() -> Counter:
    """(file, task name) -> how often a string constant equal to a task name appears in that file of ``datamodules/``
    (docstrings left out)."""
    return Counter((p.relative_to(REPO).as_posix(), name) for p in sorted((REPO / "datamodules").rglob("*.py"))
                   for _, name in task_literals(p.read_text()))


def test_the_data_layer_names_no_task():
    """No file under ``datamodules/`` names a task (a branch on a task, a map of tasks, a task's own map key): the
    data layer is handed target specs. Only the format values of ``DATA_LAYER_VALUES`` remain, once each."""
    found = data_layer_literals()
    named = [f"{path}: '{name}' x{count}" for (path, name), count in sorted(found.items())
             if (path, name) not in DATA_LAYER_VALUES or count > 1]
    assert not named, "task names in the data layer (hand it a target spec or a MapRule instead):\n" + "\n".join(named)
    gone = sorted(set(DATA_LAYER_VALUES) - set(found))
    assert not gone, f"listed in DATA_LAYER_VALUES but no longer there (drop them): {gone}"
    assert len(list((REPO / "datamodules").rglob("*.py"))) > 60  # the whole data layer is read


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


def task_members() -> set[str]:
    """What the task classes have beyond every module's: the methods and class attributes of the classes in the
    task folders and of the inference base (capabilities, hooks), and pose's ``metainfo``; less the members of
    ``TaskModule`` and of the training layer's ``RunModule``, which any module has."""
    files = [REPO / "sapiens2_ft" / "tasks" / "inference.py"]
    files += [p for p in (REPO / "sapiens2_ft" / "tasks").glob("*/*.py") if p.parent.name in TASKS]
    names = {"metainfo"}
    for path in files:
        for node in ast.walk(ast.parse(path.read_text())):
            for item in node.body if isinstance(node, ast.ClassDef) else ():
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    names.add(item.name)
                elif isinstance(item, (ast.Assign, ast.AnnAssign)):
                    targets = item.targets if isinstance(item, ast.Assign) else [item.target]
                    names.update(t.id for t in targets if isinstance(t, ast.Name))
    return names - set(dir(TaskModule)) - set(dir(RunModule)) - set(RunModule.__annotations__)


def is_class_member(node: ast.AST) -> bool:
    """``type(x).name`` or ``Class.name``: a member looked up on a class (objects compared by identity are not)."""
    if not isinstance(node, ast.Attribute):
        return False
    owner = node.value
    return (isinstance(owner, ast.Call) and isinstance(owner.func, ast.Name) and owner.func.id == "type") or \
        (isinstance(owner, ast.Name) and owner.id[:1].isupper())


def task_kind_proxies(source: str, members: set[str]) -> list[tuple[int, str]]:
    """(line, what) of each stand-in for a task-name test: a ``TaskSpec`` kind field compared with a string literal,
    ``getattr`` / ``hasattr`` of a task class's member by name, and two attributes compared by identity."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            fields = [s.attr if isinstance(s, ast.Attribute) else s.id for s in sides
                      if isinstance(s, (ast.Attribute, ast.Name)) and (getattr(s, "attr", None) or s.id) in SPEC_KINDS]
            if fields and any(isinstance(s, ast.Constant) and isinstance(s.value, str) for s in sides):
                found.append((node.lineno, f"{fields[0]} compared with a string"))
            if any(isinstance(op, (ast.Is, ast.IsNot)) for op in node.ops) and all(is_class_member(s) for s in sides):
                found.append((node.lineno, f"method identity ({sides[0].attr})"))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr") \
                and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) and node.args[1].value in members:
            found.append((node.lineno, f"{node.func.id}(..., {node.args[1].value!r})"))
    return sorted(found)


def test_no_task_kind_proxies_outside_the_registry_and_the_task_folders():
    members = task_members()
    found = [f"{p.relative_to(REPO)}:{line}: {what}" for p in checked_files()
             for line, what in task_kind_proxies(p.read_text(), members)]
    assert not found, ("tasks told apart by proxy (declare the capability on the TaskSpec or the inference class, "
                       "and ask that):\n" + "\n".join(found))


def test_the_proxy_check_sees_each_kind():
    """The check above passes on code without proxies; make sure it would see each of them."""
    code = '''def f(spec, module, m):
    if spec.predictor == "crops" or "keypoints" != spec.model.label_arg:
        pass
    focal = callable(getattr(module, "with_focal", None))
    people = type(module).people is not TaskModule.people
    sets = hasattr(m, "metainfo"), getattr(module, "task", None), spec.model.label_arg is None, m.model is module.model
'''
    members = task_members()
    assert {"with_focal", "people", "finds_people", "takes_person_boxes", "metainfo"} <= members
    assert not {"task", "labels", "predict", "validation_panels"} & members  # what every module has
    assert task_kind_proxies(code, members) == [
        (2, "label_arg compared with a string"), (2, "predictor compared with a string"),
        (4, "getattr(..., 'with_focal')"), (5, "method identity (people)"), (6, "hasattr(..., 'metainfo')")]
