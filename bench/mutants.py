"""Mutation testing: small breaks of a module, one at a time, each run against the module's fast tests.

A mutant changes one thing the tests should notice: an arithmetic operator (``+`` / ``-``, ``*`` / ``/``, ``&`` /
``|``, ...), a comparison (``<`` / ``<=``, ``==`` / ``!=``, ``is`` / ``is not``, ...), ``and`` / ``or``, a
dropped ``-`` / ``not`` / ``~``, a number (an int + 1, a float x 1.5, 0.0 -> 0.5) or a bool. Docstrings, error
messages (``raise`` statements), decorators and annotations are left alone. A mutant is *killed* when a test fails
(or the run passes ``--timeout``) and *survives* when they all pass: a survivor is a change no test sees, either
harmless (an equivalent mutant: ``x[..., :2]`` of a 2-wide array, a cache size) or a gap worth a test.

Each mutant runs in a copy of the checkout (``sapiens2_ft``, ``datamodules`` and ``tests`` copied, the rest
linked), in a process forked from this one after it has imported torch, lightning, transformers and pytest (not
the project), so that a mutant costs its tests and fixtures, not the imports. Mutants are numbered in source
order; ``--max`` samples that many (``--seed``), ``--ids`` reruns chosen ones. Not in CI: minutes per module.

The hand-written mutants of ``hand_mutants.py`` (a table of file, old text, new text, why and the fast tests that
must fail) are the slips a developer would make in a feature; they run after the operator mutants when no
``--module`` is given, or alone with ``--hand``, and are reported apart. An old text not found exactly once is an
error before anything runs.

Run (docs/mutation.md has the modules, their tests and the results)::

    nice -n 10 python bench/mutants.py --max 40 --json bench/out/mutants   # every module of TARGETS, 40 each; hand
    nice -n 10 python bench/mutants.py --module sapiens2_ft/tasks/matting/metric.py --ids 53 113  # two again
    python bench/mutants.py --module datamodules/dense/geometry.py --list   # the mutants, none run
    nice -n 10 python bench/mutants.py --hand                              # the hand-written mutants only
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import random
import re
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from hand_mutants import HAND, TableError, mutated  # bench/, beside this script

ROOT = Path(__file__).resolve().parents[1]
COPIED = ("sapiens2_ft", "datamodules", "tests")  # what a mutant may change or import; the rest is linked
PRELOAD = ("numpy", "scipy.ndimage", "cv2", "torch", "torchmetrics", "lightning", "transformers",
           "pycocotools.cocoeval", "albumentations", "pytest")
PYTEST_ARGS = ("-x", "-q", "--no-header", "-p", "no:cacheprovider", "-o", "addopts=", "-m",
               "not slow and not distributed")

# The modules the habit covers, with the fast tests that cover each (docs/mutation.md).
_METRIC_TESTS = ["tests/tasks/test_dense_metrics.py", "tests/tasks/test_diagnostics.py"]
_LOSS_TESTS = ["tests/tasks/test_dense_losses.py", "tests/tasks/test_loss_on_truth.py"]
TARGETS = {
    "sapiens2_ft/tasks/pose/codec.py": ["tests/tasks/pose/test_codec.py", "tests/tasks/pose/test_ce_scores.py",
                                        "tests/tasks/test_loss_on_truth.py"],
    "sapiens2_ft/tasks/pose/loss.py": ["tests/tasks/pose/test_ce_scores.py", "tests/tasks/test_loss_on_truth.py"],
    "sapiens2_ft/tasks/pose/metric.py": ["tests/tasks/pose/test_coco_metric.py", "tests/tasks/test_diagnostics.py"],
    "sapiens2_ft/tasks/pose/oks_nms.py": ["tests/tasks/pose/test_coco_metric.py"],
    "sapiens2_ft/tasks/seg/loss.py": ["tests/tasks/seg/test_loss_parity_seg_normal.py", *_LOSS_TESTS],
    "sapiens2_ft/tasks/seg/metric.py": _METRIC_TESTS,
    "sapiens2_ft/tasks/normal/loss.py": ["tests/tasks/seg/test_loss_parity_seg_normal.py", *_LOSS_TESTS],
    "sapiens2_ft/tasks/normal/metric.py": _METRIC_TESTS,
    "sapiens2_ft/tasks/pointmap/loss.py": ["tests/tasks/pointmap/test_pointmap_parity.py", *_LOSS_TESTS],
    "sapiens2_ft/tasks/pointmap/metric.py": [*_METRIC_TESTS, "tests/tasks/pointmap/test_focal_floor.py"],
    "sapiens2_ft/tasks/matting/loss.py": _LOSS_TESTS,
    "sapiens2_ft/tasks/matting/metric.py": _METRIC_TESTS,
    "sapiens2_ft/tasks/dense_maps.py": ["tests/tasks/test_dense_maps.py", *_LOSS_TESTS,
                                        "tests/tasks/test_dense_metrics.py"],
    "datamodules/dense/geometry.py": ["tests/data/test_dense_augment.py", "tests/data/test_dense_data.py",
                                      "tests/data/test_cpu_paths.py", "tests/tasks/pointmap/test_pointmap_parity.py"],
    "datamodules/transforms/affine.py": ["tests/data/test_geometry.py", "tests/data/test_pose_data.py",
                                         "tests/data/test_pose_augment_parity.py"],
}

BINARY = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Div, ast.Div: ast.Mult, ast.FloorDiv: ast.Mult,
          ast.Mod: ast.FloorDiv, ast.Pow: ast.Mult, ast.BitAnd: ast.BitOr, ast.BitOr: ast.BitAnd}
COMPARE = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq, ast.NotEq: ast.Eq,
           ast.Is: ast.IsNot, ast.IsNot: ast.Is, ast.In: ast.NotIn, ast.NotIn: ast.In}
BOOLEAN = {ast.And: ast.Or, ast.Or: ast.And}
SYMBOL = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%", ast.Pow: "**",
          ast.BitAnd: "&", ast.BitOr: "|", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==",
          ast.NotEq: "!=", ast.Is: "is", ast.IsNot: "is not", ast.In: "in", ast.NotIn: "not in", ast.And: "and",
          ast.Or: "or", ast.USub: "-", ast.Not: "not", ast.Invert: "~"}


@dataclass
class Mutant:
    id: int
    line: int
    column: int
    change: str  # what it changes, e.g. "< -> <="
    source: str  # the line as written
    outcome: str = ""  # killed | survived | timeout
    seconds: float = 0.0

    @property
    def where(self) -> str:
        return f"L{self.line}:{self.column}"


def _skipped_nodes(tree: ast.AST) -> set[int]:
    """ids of the nodes not mutated: docstrings, raise statements, decorators, annotations, f-strings."""
    roots = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body \
                and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant):
            roots.append(node.body[0])
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            roots += node.decorator_list
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            roots += [a.annotation for a in ast.walk(node.args) if isinstance(a, ast.arg) and a.annotation]
            roots += [node.returns] if node.returns else []
        if isinstance(node, ast.AnnAssign):
            roots.append(node.annotation)
        if isinstance(node, (ast.Raise, ast.JoinedStr)):
            roots.append(node)
    return {id(n) for root in roots for n in ast.walk(root)}


def _changes(node: ast.AST) -> list[str]:
    """The mutations of one node, as descriptions (the node's position in the walk says where)."""
    if isinstance(node, (ast.BinOp, ast.AugAssign)) and type(node.op) in BINARY:
        return [f"{SYMBOL[type(node.op)]} -> {SYMBOL[BINARY[type(node.op)]]}"]
    if isinstance(node, ast.Compare):
        return [f"{SYMBOL[type(op)]} -> {SYMBOL[COMPARE[type(op)]]} (#{i})" for i, op in enumerate(node.ops)
                if type(op) in COMPARE]
    if isinstance(node, ast.BoolOp):
        return [f"{SYMBOL[type(node.op)]} -> {SYMBOL[BOOLEAN[type(node.op)]]}"]
    if isinstance(node, ast.UnaryOp) and type(node.op) in (ast.USub, ast.Not, ast.Invert):
        if isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant):
            return []  # a negative literal: the constant rule covers it
        return [f"{SYMBOL[type(node.op)]} dropped"]
    if isinstance(node, ast.Constant) and type(node.value) in (bool, int, float):
        return [f"{node.value!r} -> {_constant(node.value)!r}"]
    return []


def _constant(value):
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    return 0.5 if value == 0.0 else round(value * 1.5, 12)


def _apply(node: ast.AST, change: str) -> ast.AST:
    """``node`` with ``change`` made (the parent's field is replaced when the node itself changes kind)."""
    if isinstance(node, (ast.BinOp, ast.AugAssign)):
        node.op = BINARY[type(node.op)]()
    elif isinstance(node, ast.Compare):
        i = int(change.rsplit("#", 1)[1].rstrip(")"))
        node.ops[i] = COMPARE[type(node.ops[i])]()
    elif isinstance(node, ast.BoolOp):
        node.op = BOOLEAN[type(node.op)]()
    elif isinstance(node, ast.UnaryOp):
        return node.operand
    elif isinstance(node, ast.Constant):
        node.value = _constant(node.value)
    return node


def mutants(source: str) -> list[tuple[int, str, Mutant]]:
    """(index of the node in ``ast.walk`` order, change, Mutant) for every mutation of ``source``, in source order."""
    tree = ast.parse(source)
    skipped, lines = _skipped_nodes(tree), source.splitlines()
    found = [(index, change, node.lineno, node.col_offset) for index, node in enumerate(ast.walk(tree))
             if id(node) not in skipped and hasattr(node, "lineno") for change in _changes(node)]
    found.sort(key=lambda f: (f[2], f[3], f[0], f[1]))
    return [(index, change, Mutant(i, line, column, change, lines[line - 1].strip()))
            for i, (index, change, line, column) in enumerate(found)]


def mutated_source(source: str, index: int, change: str) -> str:
    """``source`` with the one mutation at walk position ``index`` made."""
    tree = ast.parse(source)
    parents = {id(child): (parent, field) for parent in ast.walk(tree) for field, value in ast.iter_fields(parent)
               for child in (value if isinstance(value, list) else [value]) if isinstance(child, ast.AST)}
    node = list(ast.walk(tree))[index]
    replaced = _apply(node, change)
    if replaced is not node:  # a dropped unary operator: its operand takes its place
        parent, field = parents[id(node)]
        value = getattr(parent, field)
        setattr(parent, field, [replaced if v is node else v for v in value] if isinstance(value, list) else replaced)
    return ast.unparse(tree) + "\n"


def make_sandbox() -> Path:
    """A copy of the checkout's packages and tests, the rest linked."""
    sandbox = Path(tempfile.mkdtemp(prefix="mutants-"))
    for entry in ROOT.iterdir():
        if entry.name.startswith(".") or entry.name.endswith(".egg-info"):
            continue
        if entry.name in COPIED:
            shutil.copytree(entry, sandbox / entry.name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            (sandbox / entry.name).symlink_to(entry)
    return sandbox


def run_tests(sandbox: Path, tests: list[str], timeout: float, threads: int,
              log: Path | None = None) -> tuple[str, float]:
    """Run ``tests`` in a forked process in ``sandbox``: (killed | survived | timeout, seconds). ``log``: a file for
    pytest's output (with the failed tests' ids), else it is dropped."""
    start = time.perf_counter()
    pid = os.fork()
    if pid == 0:  # the child: its own process group (killed whole on a timeout), quiet, the sandbox's packages
        code = 1
        try:
            os.setsid()
            out = os.open(log or os.devnull, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            os.dup2(out, 1)
            os.dup2(out, 2)
            os.chdir(sandbox)
            sys.path.insert(0, str(sandbox))
            # the processes tests start (train.py, python -m ...) import the sandbox's packages too
            os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(sandbox), os.environ.get("PYTHONPATH")]))
            sys.dont_write_bytecode = True
            import pytest
            import torch

            torch.set_num_threads(threads)
            code = int(pytest.main([*PYTEST_ARGS, "-rf", *tests]))
        finally:
            os._exit(code)
    deadline = start + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            outcome = "survived" if os.waitstatus_to_exitcode(status) == 0 else "killed"
            return outcome, time.perf_counter() - start
        if time.perf_counter() > deadline:
            os.killpg(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return "timeout", time.perf_counter() - start
        time.sleep(0.05)


def run_module(module: str, tests: list[str], args) -> list[Mutant]:
    """The chosen mutants of ``module`` run against ``tests``; each printed as it ends."""
    source = (ROOT / module).read_text()
    found = mutants(source)
    chosen = [found[i] for i in args.ids] if args.ids else found
    if not args.ids and args.max and args.max < len(found):
        chosen = sorted(random.Random(args.seed).sample(found, args.max), key=lambda f: f[2].id)
    if args.list:
        for _, _, m in chosen:
            print(f"{m.id:4d}  {m.where:<8s} {m.change:<18s} {m.source}")
        print(f"{len(chosen)} of {len(found)} mutants of {module}")
        return []
    sandbox = make_sandbox()
    target = sandbox / module
    cache = target.parent / "__pycache__"
    results = []
    try:
        outcome, baseline = run_tests(sandbox, tests, args.timeout or 3600, args.threads)
        if outcome != "survived":
            sys.exit(f"{module}: its tests fail without a mutation ({outcome}): fix them first")
        timeout = args.timeout or 3 * baseline + 30
        print(f"{module}: {len(chosen)} of {len(found)} mutants; tests {' '.join(tests)} pass in {baseline:.1f} s "
              f"(timeout {timeout:.0f} s)", flush=True)
        for n, (index, change, mutant) in enumerate(chosen, 1):
            target.write_text(mutated_source(source, index, change))
            shutil.rmtree(cache, ignore_errors=True)
            mutant.outcome, mutant.seconds = run_tests(sandbox, tests, timeout, args.threads)
            results.append(mutant)
            print(f"[{n}/{len(chosen)}] {mutant.outcome:8s} #{mutant.id:<4d} {mutant.where:<8s} {mutant.change:<18s} "
                  f"{mutant.seconds:5.1f} s  {mutant.source[:70]}", flush=True)
    finally:
        shutil.rmtree(sandbox, ignore_errors=True)
    survivors = [m for m in results if m.outcome == "survived"]
    print(f"\n{module}: {len(results)} mutants, {len(results) - len(survivors)} killed, {len(survivors)} survived")
    for m in survivors:
        print(f"  survived #{m.id} {m.where} {m.change}: {m.source}")
    if survivors:
        print(f"rerun them: --module {module} --ids {' '.join(str(m.id) for m in survivors)}")
    if args.json:
        args.json.mkdir(parents=True, exist_ok=True)
        out = args.json / (module.replace("/", ".").removesuffix(".py") + ".json")
        out.write_text(json.dumps({"module": module, "tests": tests, "total": len(found), "seed": args.seed,
                                   "mutants": [asdict(m) for m in results]}, indent=1))
    return results


def failed_tests(log: Path) -> list[str]:
    """The node ids pytest's short summary lists as failed."""
    text = log.read_text(errors="replace") if log.is_file() else ""
    return re.findall(r"^(?:FAILED|ERROR) (\S+)", text, re.M)


def run_hand(names: list[str], args) -> list[dict]:
    """The hand-written mutants (``hand_mutants.HAND``; ``names``: these only), each against its own tests, printed
    as each ends. Every entry is checked against the code first: an ``old`` text not found exactly once stops
    the run before any mutant runs."""
    table = {m.name: m for m in HAND}
    unknown = sorted(set(names) - set(table))
    if unknown:
        sys.exit(f"--hand: no such mutants {unknown}; --hand --list names them")
    chosen = [table[n] for n in names] if names else list(HAND)
    try:
        sources = {m.name: mutated(ROOT, m) for m in chosen}
    except TableError as err:  # the table is out of date: nothing runs
        sys.exit(f"bench/hand_mutants.py: {err}")
    outside = [m.name for m in chosen if Path(m.file).parts[0] not in COPIED]
    if outside:
        sys.exit(f"hand mutants {outside}: a mutated file must be under {COPIED} (the sandbox's copies)")
    if args.list:
        for m in chosen:
            print(f"{m.name:32s} {m.file}: {m.why}")
        print(f"{len(chosen)} of {len(HAND)} hand mutants")
        return []
    tests = list(dict.fromkeys(t for m in chosen for t in m.tests))
    sandbox = make_sandbox()
    log = sandbox / "hand.log"
    results = []
    try:
        outcome, baseline = run_tests(sandbox, tests, args.timeout or 3600, args.threads, log)
        if outcome != "survived":
            sys.exit(f"hand mutants: their tests fail without a mutation ({outcome}: {failed_tests(log)}): fix them "
                     f"first")
        timeout = args.timeout or 3 * baseline + 30
        print(f"hand mutants: {len(chosen)}; their {len(tests)} tests pass in {baseline:.1f} s "
              f"(timeout {timeout:.0f} s a mutant)", flush=True)
        for n, m in enumerate(chosen, 1):
            target = sandbox / m.file
            original = target.read_text()
            target.write_text(sources[m.name])
            try:
                outcome, seconds = run_tests(sandbox, list(m.tests), timeout, args.threads, log)
            finally:
                target.write_text(original)
            failed = failed_tests(log)
            results.append({"name": m.name, "file": m.file, "why": m.why, "tests": list(m.tests), "outcome": outcome,
                            "failed": failed, "seconds": round(seconds, 1)})
            print(f"[{n}/{len(chosen)}] {outcome:8s} {m.name:32s} {seconds:5.1f} s  {' '.join(failed)[:90]}",
                  flush=True)
    finally:
        shutil.rmtree(sandbox, ignore_errors=True)
    survivors = [r["name"] for r in results if r["outcome"] == "survived"]
    print(f"\nhand mutants: {len(results)}, {len(results) - len(survivors)} killed, {len(survivors)} survived"
          + (f": {' '.join(survivors)}" if survivors else ""))
    print("\n| mutant | file | outcome | failed |\n|---|---|---|---|")
    for r in results:
        print(f"| {r['name']} | `{r['file']}` | {r['outcome']} | {', '.join(r['failed']) or '-'} |")
    if args.json:
        args.json.mkdir(parents=True, exist_ok=True)
        (args.json / "hand.json").write_text(json.dumps(results, indent=1))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--module", nargs="+", default=[],
                        help=f"modules to mutate, relative to the checkout (default: all of TARGETS, {len(TARGETS)})")
    parser.add_argument("--tests", nargs="+", help="their fast tests (files or node ids); default: TARGETS' own")
    parser.add_argument("--max", type=int, default=0, help="run this many mutants of each module, sampled (0: all)")
    parser.add_argument("--seed", type=int, default=0, help="the sample's seed")
    parser.add_argument("--ids", type=int, nargs="+", help="run these mutants (ids of --list or of a run)")
    parser.add_argument("--timeout", type=float, default=0, help="seconds a mutant may run (0: 3 x the baseline + 30)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads of each run")
    parser.add_argument("--list", action="store_true", help="list the mutants and stop")
    parser.add_argument("--json", type=Path, help="a folder for each module's results (JSON)")
    parser.add_argument("--hand", nargs="*", metavar="NAME",
                        help="run the hand-written mutants only (bench/hand_mutants.py; names: these ones). Without "
                             "--module or --hand, the operator mutants of TARGETS run, then the hand-written ones")
    args = parser.parse_args()
    if args.hand is not None:
        if args.module or args.ids or args.tests:
            parser.error("--hand runs the hand-written mutants against their own tests: no --module, --ids, --tests")
        if not args.list:
            for name in PRELOAD:
                __import__(name)
        results = run_hand(args.hand, args)
        sys.exit(1 if any(r["outcome"] == "survived" for r in results) else 0)
    modules = args.module or list(TARGETS)
    unknown = [m for m in modules if not args.tests and m not in TARGETS]
    if unknown:
        parser.error(f"--tests: no default tests for {unknown}; give them")
    if not args.list:
        for name in PRELOAD:  # imported once here, inherited by every fork
            __import__(name)
    rows = []
    for module in modules:
        results = run_module(module, args.tests or TARGETS[module], args)
        if results:
            killed = sum(m.outcome != "survived" for m in results)
            rows.append(f"| `{module}` | {len(results)} | {killed} | {len(results) - killed} |")
    if len(rows) > 1:
        print("\n| module | mutants | killed | survived |\n|---|---|---|---|\n" + "\n".join(rows))
    if not args.module:  # the whole habit: the hand-written mutants too, reported apart
        print("\n-- hand-written mutants (bench/hand_mutants.py) --", flush=True)
        run_hand([], args)


if __name__ == "__main__":
    main()
