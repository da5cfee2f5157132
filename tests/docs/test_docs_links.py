"""README.md and docs/*.md point only at things that exist.

Checked in every page:

- links: a relative link's file exists, and its ``#anchor`` is a heading of the page it names;
- repository paths in inline code (`sapiens2_ft/tasks/pose/module.py`, `configs/pose_coco.yaml`,
  `tests/training/...`, `tasks/seg/`, bare `pose_demo.yaml` or `oks_nms.py`) exist; placeholders
  (`<task>`, `NAME`, `...`) end the checked part, `*` must match, `{a,b}` is expanded;
- dotted names of the packages in inline code (`sapiens2_ft.training.strategies.FSDP2Strategy`) resolve
  to a module and a name defined in it, read from the source (nothing is imported);
- commands, inline or in code blocks: every ``python -m MODULE`` can be found (``importlib.util.find_spec``),
  every ``python SCRIPT.py`` exists, every ``--config NAME.yaml`` resolves as ``train.py`` resolves it.

The README is the quick start: at most 150 lines. Fenced code blocks are checked for commands only (they
also show user paths, hub ids and, in the upgrade note, the old class path).
"""

from __future__ import annotations

import importlib.util
import itertools
import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
README_MAX_LINES = 150

# Generated or user folders: paths under them are examples, not repository files.
NOT_REPOSITORY = {"data", "runs", "wandb", "lightning_logs", "out", "photos"}
# Short forms the pages use for folders inside the packages, resolved under these bases.
SHORT_BASES = ("sapiens2_ft", "sapiens2_ft/training", "datamodules", "configs")
# Bare YAML names that are not recipes in configs/: files a run or a user writes.
NOT_RECIPES = {"config.yaml", "hparams.yaml", "keypoints.yaml", "classes.yaml", "my_keypoints.yaml", "my_set.yaml",
               "my_parts.yaml", "config.resumeN.yaml", "hparams.resumeN.yaml", "config.resume1.yaml"}  # a run's files
CHECKED_SUFFIXES = (".py", ".sh", ".md", ".yaml", ".toml")
PACKAGES = ("sapiens2_ft", "datamodules")

FENCE = re.compile(r"^ {0,3}(```|~~~).*?^ {0,3}\1[^\n]*$", re.M | re.S)
CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.S)
LINK = re.compile(r"\[([^\]]*)\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.+?)\s*#*\s*$", re.M)
PYTHON_M = re.compile(r"\bpython3? -m ([A-Za-z_][\w.]*)")
PYTHON_SCRIPT = re.compile(r"\bpython3? ([\w./-]+\.py)\b")
CONFIG_ARG = re.compile(r"--config[ =]([\w./*-]+\.yaml)\b")


def _walk_names() -> set[str]:
    """Base names of the files in the repository (generated and environment folders left out)."""
    names = set()
    for dirpath, dirnames, filenames in os.walk(ROOT):
        dirnames[:] = [d for d in dirnames if not d.startswith(".") and d not in NOT_REPOSITORY
                       and d != "__pycache__" and not d.endswith(".egg-info")]
        names.update(filenames)
    return names


FILE_NAMES = _walk_names()
TOP_LEVEL = {p.name for p in ROOT.iterdir() if not p.name.startswith(".")} - NOT_REPOSITORY
SHORT_ROOTS = {p.name for base in SHORT_BASES for p in (ROOT / base).iterdir() if p.is_dir()} - TOP_LEVEL


def split_page(text: str) -> tuple[str, list[str]]:
    """(the page without its fenced code blocks, the blocks)."""
    blocks = [m.group(0) for m in FENCE.finditer(text)]
    return FENCE.sub("", text), blocks


def code_spans(prose: str) -> list[str]:
    return [m.group(2).strip() for m in CODE_SPAN.finditer(prose)]


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = CODE_SPAN.sub(lambda m: m.group(2), heading)
    text = LINK.sub(lambda m: m.group(1), text)
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    prose, _ = split_page(page.read_text())
    seen: dict[str, int] = {}
    out = set()
    for m in HEADING.finditer(prose):
        base = slug(m.group(2))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def expand_braces(token: str) -> list[str]:
    m = re.search(r"\{([^{}]*,[^{}]*)\}", token)
    if not m:
        return [token]
    return list(itertools.chain.from_iterable(
        expand_braces(token[:m.start()] + part + token[m.end():]) for part in m.group(1).split(",")))


def is_placeholder(part: str) -> bool:
    return ("<" in part or ">" in part or "..." in part or part in ("X", "N")
            or re.fullmatch(r"[A-Z][A-Z0-9_]*(\.\w+)?", part) is not None)


def path_exists(parts: list[str], bases: tuple[str, ...]) -> bool:
    relative = "/".join(parts)
    for base in bases:
        candidate = ROOT / base / relative if base else ROOT / relative
        if any(c in relative for c in "*?[") and list(ROOT.glob(str(candidate.relative_to(ROOT)))):
            return True
        if candidate.exists():
            return True
    return False


def check_path(token: str) -> str | None:
    """A problem with a path-like word of inline code, or None (fine, or not a repository path)."""
    token = token.strip("\"'(),;:[]").split("::")[0]
    if not token or token.startswith(("-", "http", "~", "$")) or "=" in token:
        return None
    for path in expand_braces(token):
        parts = [p for p in path.split("/") if p not in ("", ".")]
        if not parts:
            continue
        if len(parts) == 1 and "/" not in path:  # a bare name: a recipe or a file somewhere in the tree
            name = parts[0]
            if is_placeholder(name) or not name.endswith(CHECKED_SUFFIXES):
                continue
            if name.endswith(".yaml"):
                if name not in NOT_RECIPES and not path_exists([name], ("configs", "configs/strategy")):
                    return f"`{token}`: no such recipe in configs/"
            elif name not in FILE_NAMES and not any(c in name for c in "*?"):
                return f"`{token}`: no file of that name in the repository"
            continue
        if parts[0] in TOP_LEVEL:
            bases: tuple[str, ...] = ("",)
        elif parts[0] in SHORT_ROOTS:
            bases = SHORT_BASES
        else:
            continue  # a user path, a hub id, a dataset folder
        known = list(itertools.takewhile(lambda p: not is_placeholder(p), parts))
        if known and not path_exists(known, bases):
            return f"`{token}`: {'/'.join(known)} does not exist"
    return None


def defines(source: Path, name: str) -> bool:
    text = source.read_text()
    return re.search(rf"^\s*(class|def)\s+{re.escape(name)}\b|^{re.escape(name)}\s*[:=]|\b{re.escape(name)}\b.*\bimport"
                     rf"|import\b.*\b{re.escape(name)}\b", text, re.M) is not None


def check_dotted(token: str) -> str | None:
    """`sapiens2_ft.x.y.Name`: the longest module prefix is a file of the package, the rest a name in it."""
    token = token.strip("\"'(),;:[]")
    if not re.fullmatch(r"(sapiens2_ft|datamodules)(\.\w+)+", token):
        return None
    parts = list(itertools.takewhile(lambda p: not is_placeholder(p), token.split(".")))
    for k in range(len(parts), 0, -1):
        module = ROOT.joinpath(*parts[:k])
        source = module.with_suffix(".py") if module.with_suffix(".py").is_file() else module / "__init__.py"
        if source.is_file():
            rest = parts[k:]
            if not rest or defines(source, rest[0]):
                return None
            return f"`{token}`: {'.'.join(parts[:k])} defines no {rest[0]}"
    return f"`{token}`: no such module"


def check_commands(text: str) -> list[str]:
    problems = []
    for module in PYTHON_M.findall(text):
        if any(is_placeholder(part) for part in module.split(".")):
            continue
        spec = importlib.util.find_spec(module)
        if spec is None:
            problems.append(f"python -m {module}: no such module")
        elif spec.submodule_search_locations is not None and importlib.util.find_spec(f"{module}.__main__") is None:
            problems.append(f"python -m {module}: a package without __main__")
    for script in PYTHON_SCRIPT.findall(text):
        if not (ROOT / script).is_file():
            problems.append(f"python {script}: no such file")
    for name in CONFIG_ARG.findall(text):
        if name.startswith("runs/"):  # a run's own config.yaml, made by a command before it
            continue
        if not is_placeholder(name) and not path_exists([name], ("configs", "")):
            problems.append(f"--config {name}: not in configs/")
    return problems


def label(page: Path) -> str:
    return str(page.relative_to(ROOT)) if page.is_relative_to(ROOT) else page.name


def page_problems(page: Path) -> list[str]:
    prose, blocks = split_page(page.read_text())
    problems = []
    spans = code_spans(prose)
    for _, target in LINK.findall(CODE_SPAN.sub("", prose)):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            problems.append(f"link ({target}): {path} does not exist")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            problems.append(f"link ({target}): no heading #{anchor} in {label(file)}")
    for span in spans:
        for word in span.split():
            problem = check_path(word) or check_dotted(word)
            if problem:
                problems.append(problem)
    problems += check_commands("\n".join(spans + blocks))
    return [f"{label(page)}: {p}" for p in problems]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_page_points_only_at_things_that_exist(page):
    problems = page_problems(page)
    assert not problems, "\n".join(problems)


def test_readme_is_a_quick_start():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; move detail to docs/"


def test_the_checks_catch_broken_references(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# Title\n\n[ok](#title) [gone](missing.md) [anchor](#nowhere)\n\n"
                    "`sapiens2_ft/tasks/pose/nothing.py` `configs/pose_gone.yaml` `tests/nowhere/...` `gone_demo.yaml`\n"
                    "`sapiens2_ft.strategies.FSDP2Strategy` `python -m sapiens2_ft.nothing`\n\n"
                    "```bash\npython train.py --config no_such_recipe.yaml\n```\n")
    found = page_problems(page)
    for expected in ("missing.md", "#nowhere", "nothing.py", "pose_gone.yaml", "tests/nowhere", "gone_demo.yaml",
                     "sapiens2_ft.strategies", "sapiens2_ft.nothing", "no_such_recipe.yaml"):
        assert any(expected in p for p in found), (expected, found)
    assert not any("#title" in p for p in found), found


def test_deploy_shows_the_onnx_example_as_it_is():
    """docs/deploy.md prints docs/examples/onnx_pose.py, which the tests run: the page's copy is the file."""
    page = (ROOT / "docs" / "deploy.md").read_text()
    example = (ROOT / "docs" / "examples" / "onnx_pose.py").read_text()
    assert f"```python\n{example}```" in page, "docs/deploy.md's copy of docs/examples/onnx_pose.py differs from it"


METRIC = r"(?:AP|AP50|AP75|AR|mIoU|SAD|MSE|PSNR|L2|SSIM|MAE|mean angle|pixel accuracy)"
FIGURE = re.compile(rf"\b{METRIC}(?:_\w+)?\s*[=:]?\s*(-?\d+(?:\.\d+)?)")
HISTORY = ("benchmarks.md", "demo_backbone.md")  # pages of dated measurements, history included
DATED = re.compile(r"\b20\d\d-\d\d\b|\bearlier\b|\bbefore\b")


def demo_figures(text: str, table: set[str]) -> list[str]:
    """The sentences of ``text`` that give a figure of a demo (a sentence naming a demo, with a metric and its value)
    that is neither in the README's demo table (``table``) nor dated as history (a date, "earlier", "before")."""
    text = re.sub(r"```.*?```", " ", text, flags=re.S)
    stale = []
    for item in re.split(r"\n\s*(?:- |\d+\. |#+ |\n)", text):  # list items, headings and paragraphs apart
        for sentence in re.split(r"(?<=[.!?])\s+(?=[A-Z(`])", re.sub(r"\s*\n\s*", " ", item)):
            if "demo" in sentence and not DATED.search(sentence) and any(
                    m.group(1) not in table for m in FIGURE.finditer(sentence)):
                stale.append(sentence)
    return stale


def test_docs_quote_the_demo_table_or_no_number():
    """issue 60: deploy.md and evaluate.md still quoted the pose demo's AP of an older backbone (0.034) beside a README
    table saying 0.378 (since 0.379). A page that gives a demo's figure as current quotes the README's table."""
    readme = (ROOT / "README.md").read_text()
    rows = [line for line in readme.splitlines() if line.startswith("| ") and re.search(r"--config \w+_demo\.yaml", line)]
    assert len(rows) == 6, rows
    table = set(re.findall(r"-?\d+(?:\.\d+)?", " ".join(rows)))
    assert {"0.221", "0.379", "0.404"} <= table
    assert demo_figures("The pose demo reaches AP 0.034.\n\nThe pose demo: AP 0.379 (README).", table) == [
        "The pose demo reaches AP 0.034."]
    assert demo_figures("On 2026-12-01 the seg demo gave mIoU 0.100. An earlier demo had AP 0.2.", table) == []
    stale = {}
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        if page.name not in HISTORY:
            text = "\n".join(line for line in page.read_text().splitlines() if line not in rows)
            stale.update({f"{page.name}: {s[:120]}": 1 for s in demo_figures(text, table)})
    assert not stale, "\n".join(stale)
