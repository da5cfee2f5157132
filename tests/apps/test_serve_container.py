"""The container of docs/deploy.md, checked without a Docker engine (this kind of machine has only the client): the
``Dockerfile`` installs what the install instructions install (the project's torch pin, the ``serve`` extra, no
torchvision), runs the documented server with its health check, builds from a context without environments or data,
and the documented ``docker run`` commands give ``sapiens2-ft serve`` arguments it accepts."""

from __future__ import annotations

import json
import re
import shlex
import tomllib
from importlib.metadata import requires
from pathlib import Path

from sapiens2_ft.serve import cli

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs" / "deploy.md"


def dockerfile() -> dict[str, list[str]]:
    """Instruction -> its arguments (continuation lines joined), in order."""
    found: dict[str, list[str]] = {}
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            instruction, _, rest = line.strip().partition(" ")
            found.setdefault(instruction.upper(), []).append(rest.strip())
    return found


def documented(prefix: str) -> list[list[str]]:
    """The words of each command of docs/deploy.md's bash blocks that starts with ``prefix``."""
    blocks = re.findall(r"```bash\n(.*?)```", DOCS.read_text(), flags=re.S)
    lines = [line for block in blocks for line in block.replace("\\\n", " ").splitlines()]
    return [words for line in lines if (words := shlex.split(line, comments=True))
            and shlex.join(words).startswith(prefix)]


def test_the_image_installs_what_the_install_instructions_install():
    steps = dockerfile()
    args = dict(arg.split("=", 1) for arg in steps["ARG"])
    torch = args["TORCH"].strip('"')
    readme_pins = set(re.findall(r'pip install "(torch==[\d.]+)"', (ROOT / "README.md").read_text()))
    assert readme_pins == {torch}, (readme_pins, torch)  # the project's one torch pin
    [run] = [r for r in steps["RUN"] if "pip install" in r]
    assert re.search(r'pip install \$PIP_ARGS "\$TORCH" "/src\[serve,onnx\]"', run), run
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert "serve" in extras and "onnx" in extras and "sapiens2-ft[serve]" in extras["dev"]
    assert ["pip", "install", "-e", ".[serve]"] in documented("pip install")  # the documented extra is the image's
    text = (ROOT / "Dockerfile").read_text() + json.dumps(extras) + (ROOT / "pyproject.toml").read_text()
    assert "torchvision" not in text
    litserve = requires("litserve") or []  # it must not bring a torch (a CUDA build) or torchvision of its own
    assert not [r for r in litserve if re.match(r"(torch|torchvision)\b", r) and "extra ==" not in r], litserve
    assert steps["USER"] == ["serve"] and steps["COPY"] == [". /src"]


def test_the_image_runs_the_documented_server_with_its_health_check():
    steps = dockerfile()
    entry = json.loads(steps["ENTRYPOINT"][0])
    assert entry[:2] == ["sapiens2-ft", "serve"] and entry[entry.index("--host") + 1] == "0.0.0.0"
    port = entry[entry.index("--port") + 1]
    assert steps["EXPOSE"] == [port]
    assert f"http://127.0.0.1:{port}/health" in steps["HEALTHCHECK"][0]
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["sapiens2-ft"] == "sapiens2_ft.console:main"
    ignored = set((ROOT / ".dockerignore").read_text().split())
    assert {".git", ".venv", "data/", "runs/", "wandb/", "bench/out/"} <= ignored

    builds = documented("docker build")
    runs = documented("docker run")
    assert builds and len(runs) >= 2
    tag = builds[0][builds[0].index("-t") + 1]
    for words in runs:
        image = words.index(tag)
        mounts = [words[k + 1] for k, w in enumerate(words[:image]) if w == "-v"]
        published = [words[k + 1] for k, w in enumerate(words[:image]) if w == "-p"]
        assert published and all(p.endswith(f":{port}") for p in published), published
        args = cli.parser().parse_args(entry[2:] + words[image + 1:])  # what the container's command receives
        assert args.host == "0.0.0.0" and str(args.port) == port
        for model in args.model:  # each model is a mounted folder, read-only
            assert any(m.split(":")[1] == model and m.endswith(":ro") for m in mounts), (model, mounts)
        problems = [p for p in cli.argument_problems(args) if not p.startswith("--model")]
        assert not problems, problems
