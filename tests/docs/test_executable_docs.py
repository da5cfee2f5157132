"""The documentation is executed: every command in the bash blocks of the README and of the docs' main pages runs as
written, in order, in a folder holding what the commands expect (a user's LabelMe and CVAT exports, photos, a clip, and
the released models under their hub ids: ``doc_world.py``). The test adds only step counts to training commands. A
command it cannot run here says so by name (``NOT_RUN_HERE``: why, and which test or CI step covers it); any other
command that fails, or that the test does not know how to run, fails it: the docs cannot drift from the code."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import time
from pathlib import Path

import pytest
from conftest import tiny_detector
from doc_world import (
    released_models,
    write_clip,
    write_cvat_mask_export,
    write_labelme_export,
    write_photos,
    write_yolo_export,
)
from hub_cache import use_hub_cache

from sapiens2_ft import console

ROOT = Path(__file__).resolve().parents[2]
PAGES = ("README.md", "docs/models.md", "docs/convert.md", "docs/evaluate.md", "docs/labelling.md",  # the users' paths
         "docs/segmentation_classes.md", "docs/distill.md")
STEPS = ["--trainer.max_steps", "2", "--trainer.val_check_interval", "2"]  # the only thing added (training)
FURTHER = ["--trainer.max_steps", "4", "--trainer.val_check_interval", "2"]  # a resume: 2 steps past the run's end
NOT_RUN_HERE = (  # (pattern of a command, why not here; where it is run instead)
    (r"^python -m venv ", "installs the project: tests/apps/test_install.py builds and installs it, .ci/run runs the "
                          "README's test command verbatim"),
    (r"^python train\.py --config (pose|seg|normal|pointmap|matting)_demo\.yaml$",
     "a demo (minutes of CPU): tests/apps/test_pose_demo.py, tests/apps/test_dense_demos.py"),
    (r"_5b", "a 5b model: GPUs (a CPU memory estimate of one 5b block takes minutes); the same code at tiny size: "
             "tests/models/test_scale.py, tests/training/test_lora.py, tests/models/test_frozen_dtype.py"),
    (r"--config strategy/fsdp2\.yaml", "FSDP2 across processes: tests/models/test_scale.py (distributed)"),
    (r"^sbatch ", "a SLURM job: docs/scaling.md's job script; requeue on SIGUSR1 in tests/training/test_preemption.py"),
    (r"^python train\.py --config seg_custom\.yaml --data\.root data/my_coarse_parts ",
     "the README's seg_custom run again (90 s here) with a class set, which its check_data maps and checks here: "
     "tests/tasks/seg/test_class_set_training.py trains a set with a merge and a new class"),
    (r"evaluate .*--detector ", "the stand-in detector is random and finds nobody: tests/apps/test_evaluate.py runs "
                                "--detector with one that does"),
    (r"^pip install label-studio|label-studio start$", "Label Studio in its own environment, a server: "
                                                       "tests/apps/test_label_studio.py installs and starts it (slow)"),
    (r"convert label-studio unlabeled/", "a Label Studio export needs its server: tests/apps/test_label_studio.py "
                                         "exports a real project and converts it"),
    (r"^pip install ", "installs the project: tests/apps/test_install.py builds and installs it; the dev extra holds "
                       "the serve extra, which the server's tests use"),
    (r"^docker ", "needs a Docker engine, which this kind of machine lacks: tests/apps/test_serve_container.py checks "
                  "that the Dockerfile installs and runs what these docs do, and parses this command's arguments"),
    (r"--accelerator cuda", "GPUs: the same command on the CPU runs here (tests/apps/test_serve.py, and this "
                            "section's other commands)"),
)
SERVE_SECTION = ("docs/deploy.md", "## Serve a model over HTTP")  # its commands run by their own test, below


def commands(page: str, section: str | None = None) -> list[str]:
    """The commands of a page's ```bash blocks (of its ``section`` only: a heading, to the next one of its level):
    continuation lines joined, comments dropped."""
    text = (ROOT / page).read_text()
    if section is not None:
        level = section.split()[0]
        text = text[text.index(f"\n{section}\n"):]
        text = text[:text.find(f"\n{level} ", 1)] if f"\n{level} " in text[1:] else text
    found = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            if words:
                found.append(shlex.join(words))
    return found


def not_run_here(command: str) -> str | None:
    return next((why for pattern, why in NOT_RUN_HERE if re.search(pattern, command)), None)


PYTHON_M = {module.removesuffix(".__main__").removesuffix(".cli"): name
            for name, command in console.COMMANDS.items() for module in command.modules}


def run(command: str) -> int:
    """``command`` in this process, through the console entry points (what ``python -m`` and ``python train.py``
    run); the exit status."""
    words = shlex.split(command)
    steps = FURTHER if "--resume" in words else STEPS
    if words[:2] == ["python", "train.py"]:
        return console.main(["train", *words[2:], *steps])
    if words[:2] == ["python", "-m"] and words[2] in PYTHON_M:
        return console.main([PYTHON_M[words[2]], *words[3:]])
    if words[0] == "sapiens2-ft":
        return console.main(words[1:] + (steps if words[1:2] == ["train"] else []))
    raise AssertionError(f"the docs test does not know how to run `{command}`: teach run() or add it to NOT_RUN_HERE "
                         f"with the reason and the test that covers it")


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A folder with the files the documented commands name."""
    root = tmp_path_factory.mktemp("user")
    cache = released_models(tmp_path_factory.mktemp("released"), tiny_detector(tmp_path_factory.mktemp("det")))
    write_labelme_export(root / "my_export")
    write_labelme_export(root / "exports" / "labelme")
    write_yolo_export(root / "datasets" / "my-pose")
    write_cvat_mask_export(root / "my_cvat_masks")
    write_photos(root / "photos")
    write_photos(root / "unlabeled", count=4)  # docs/labelling.md: the images the model pre-labels
    write_photos(root / "unlabelled", count=10)  # docs/distill.md: photos nobody labelled
    write_clip(root / "clip.mp4")
    readme = (ROOT / "README.md").read_text()
    (root / "my_keypoints.yaml").write_text(re.search(r"```yaml\n(name: my_keypoints.*?)```", readme, re.S).group(1))
    classes = (ROOT / "docs" / "segmentation_classes.md").read_text()
    (root / "my_parts.yaml").write_text(re.search(r"```yaml\n(name: my_parts.*?)```", classes, re.S).group(1))
    return root, cache


@pytest.fixture
def in_world(world, monkeypatch):
    root, cache = world
    monkeypatch.chdir(root)
    use_hub_cache(monkeypatch, cache)
    return root


def run_page(page: str) -> list[str]:
    """Runs every command of ``page`` in order; returns the ones not run here (each with a reason)."""
    skipped = []
    for command in commands(page):
        why = not_run_here(command)
        if why:
            skipped.append(f"{command}: {why}")
            continue
        start = time.perf_counter()
        status = run(command)
        print(f"{time.perf_counter() - start:6.1f} s  {command}")
        assert status == 0, f"{page}: `{command}` exited with {status}"
    return skipped


@pytest.mark.slow
def test_the_readme_and_the_docs_main_pages_run_as_written(in_world):
    """The pages in order (the docs' pages use what the README's commands made: ``runs/mine``, ``data/mine``)."""
    skipped = {page: run_page(page) for page in PAGES}
    mine = in_world / "runs" / "mine"
    summary = json.loads((mine / "summary.json").read_text())
    evaluated = json.loads((in_world / "eval" / "mine" / "metrics.json").read_text())
    for name in ("loss", "AP", "AP_body", "AP_feet"):  # evaluate with the run's config.yaml: its own validation
        assert evaluated["metrics"][name] == pytest.approx(summary["metrics"][name], rel=1e-5, abs=1e-7), name
    assert len(json.loads((mine / "export" / "config.json").read_text())["id2label"]) == 21
    assert (in_world / "predictions" / "keypoints.json").is_file() and (in_world / "data_check.png").is_file()
    assert len(list((in_world / "data" / "my_parts" / "train" / "labels").glob("*.png"))) == 8
    for out in ("out/pose", "out/coco", "out/seg", "out/normal", "out/pointmap", "out/matting"):
        assert (in_world / out).is_dir(), f"{out} missing"
    assert list((in_world / "out" / "pointmap").glob("*.ply")), "the point clouds of docs/models.md's pointmap"
    assert (in_world / "out" / "clip.mp4").is_file()  # pose + seg on the clip
    assert len((in_world / "next" / "selected.txt").read_text().split()) == 2  # docs/labelling.md's loop
    assert json.loads((in_world / "runs" / "mine-2" / "summary.json").read_text())["global_step"] == 2
    assert (in_world / "prelabels" / "tasks.json").is_file()
    assert (in_world / "prelabels-cvat" / "annotations.xml").is_file()
    released = json.loads((in_world / "eval" / "released" / "metrics.json").read_text())
    assert released["samples"] == 3 and set(released["metrics"]) >= {"AP", "AR", "loss"}  # coco17 of the 308 rows
    assert len(skipped["README.md"]) == 7, "\n".join(skipped["README.md"])  # two installs, four of Scale, sbatch
    assert (in_world / "data" / "my_coarse_parts" / "classes.txt").read_text().split() == [
        "Background", "Head", "Hair", "Upper_Body", "Arms", "Hands", "Legs", "Feet", "Bag"]
    distilled = json.loads((in_world / "runs" / "mine-distilled" / "summary.json").read_text())
    assert distilled["global_step"] == 2 and json.loads((in_world / "runs" / "pseudo" / "summary.json").read_text())
    assert (in_world / "data" / "pseudo" / "keypoints.yaml").is_file()


@pytest.mark.slow
def test_the_cpu_path_of_your_data_runs_without_the_hub(world, tmp_path, monkeypatch):
    """The README's "Your data" on a machine with no GPU and no Hub: its convert command, then the CPU recipe's three
    commands as written, with an empty Hugging Face cache and the Hub out of reach (HF_HUB_OFFLINE)."""
    root = tmp_path / "laptop"
    shutil.copytree(world[0] / "my_export", root / "my_export")
    shutil.copy(world[0] / "my_keypoints.yaml", root / "my_keypoints.yaml")
    monkeypatch.chdir(root)
    use_hub_cache(monkeypatch, tmp_path / "empty-cache")  # nothing downloaded, and no way to download
    readme = commands("README.md")
    convert = next(c for c in readme if c.startswith("python -m sapiens2_ft.convert labelme my_export/"))
    cpu = [c for c in readme if "pose_custom_cpu.yaml" in c or "runs/mine-cpu" in c]
    assert len(cpu) == 3 and cpu[0].startswith("python train.py --config pose_custom_cpu.yaml"), cpu
    for command in [convert, *cpu]:
        assert run(command) == 0, command
    summary = json.loads((root / "runs" / "mine-cpu" / "summary.json").read_text())
    assert summary["global_step"] == 2 and "AP" in summary["start_metrics"] and "AP_feet" in summary["metrics"]
    assert "pretrained" in summary["model"] and "assets/sapiens2-mini-synthetic" in summary["model"]
    found = json.loads((root / "predictions-cpu" / "keypoints.json").read_text())
    assert len(found) == 3 and all(0 <= s <= 1 for person in found for s in person["keypoints"][2::3])
    assert not (tmp_path / "empty-cache").exists() or not any((tmp_path / "empty-cache").rglob("*.safetensors"))


API_PAGE = "docs/python_api.md"
PYTHON_NOT_RUN_HERE = (  # (pattern of an example, why not here; where it is run instead)
    (r"sapiens2_ft\.train\(", "fine-tunes the pose demo: tests/apps/test_api.py trains through sapiens2_ft.train, then "
                              "loads and predicts with the export"),
)


def python_examples(page: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", (ROOT / page).read_text(), flags=re.S)


def test_the_python_api_examples_run_as_written(world, tmp_path, monkeypatch, capsys):
    """docs/python_api.md's examples, in order in one namespace, on the released models' stand-ins and the photos:
    the ``Result`` of each task, its ``save``, a stream and the typed errors, as the page shows them."""
    shutil.copytree(world[0] / "photos", tmp_path / "photos")
    monkeypatch.chdir(tmp_path)
    use_hub_cache(monkeypatch, world[1])
    namespace: dict = {}
    run_here = [block for block in python_examples(API_PAGE)
                if not any(re.search(pattern, block) for pattern, _ in PYTHON_NOT_RUN_HERE)]
    assert len(run_here) == len(python_examples(API_PAGE)) - 1 == 4
    for block in run_here:
        exec(compile(block, API_PAGE, "exec"), namespace)
    assert namespace["result"].people.keypoints.shape[1:] == (17, 2) and namespace["parts"].maps["logits"].ndim == 3
    assert sorted(p.relative_to(tmp_path / "predictions").as_posix() for p in (tmp_path / "predictions").rglob("*.*")) \
        == ["images.json", "keypoints.json", "overlays/IMG_0000.jpg"]
    out = capsys.readouterr().out
    assert '"name": "IMG_0000.jpg"' in out and "batch_size: give at least 1 image per forward pass, got 0" in out


def test_every_command_is_run_or_excused_by_name():
    """The parsing sees every command (a page without any would be a silent gap) and each one either runs here or
    names why not."""
    served = commands(*SERVE_SECTION)
    assert served and all(not_run_here(c) or c.startswith(("sapiens2-ft ", "curl ", "python docs/examples/"))
                          for c in served), served
    for page in PAGES:
        found = commands(page)
        assert found, f"{page}: no bash commands found"
        for command in found:
            if not_run_here(command) is None:
                words = shlex.split(command)
                known = words[:2] == ["python", "train.py"] or words[0] == "sapiens2-ft" or (
                    words[:2] == ["python", "-m"] and words[2] in PYTHON_M)
                assert known, f"{page}: `{command}` is neither run by this test nor excused in NOT_RUN_HERE"
    assert commands("README.md")[0].startswith("python -m venv") and not_run_here(commands("README.md")[0])


class DocServers:
    """The section's servers: a ``sapiens2-ft serve`` command starts in the background (in its own process group, on
    a free port for each port the page names) and runs until the next one or the end; ``curl`` and
    ``python docs/examples/...`` commands run against it as written, with the port swapped."""

    def __init__(self, cwd: Path):
        self.cwd, self.ports, self.process = cwd, {}, None

    def port(self, documented: str) -> str:
        import socket

        if documented not in self.ports:
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                self.ports[documented] = str(s.getsockname()[1])
        return self.ports[documented]

    def swapped(self, words: list[str]) -> list[str]:
        text = shlex.join(words)
        for documented in set(re.findall(r"127\.0\.0\.1:(\d+)", text)):
            text = text.replace(f"127.0.0.1:{documented}", f"127.0.0.1:{self.port(documented)}")
        return shlex.split(text)

    def start(self, words: list[str]) -> int:
        import subprocess
        import sys

        import requests

        self.stop()
        args = words[2:]
        documented = args[args.index("--port") + 1] if "--port" in args else "8000"
        args = [a for k, a in enumerate(args) if a != "--port" and (k == 0 or args[k - 1] != "--port")]
        port = self.port(documented)
        log = self.cwd / f"serve-{documented}.log"
        self.process = subprocess.Popen([sys.executable, "-m", "sapiens2_ft.serve", *args, "--port", port],
                                        cwd=self.cwd, stdout=log.open("w"), stderr=subprocess.STDOUT,
                                        start_new_session=True)
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and self.process.poll() is None:
            try:
                if requests.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                    return 0
            except requests.ConnectionError:
                pass
            time.sleep(1)
        print(log.read_text()[-3000:])
        return 1

    def run(self, words: list[str]) -> int:
        import subprocess
        import sys

        words = self.swapped(words)
        if words[0] == "python":
            words = [sys.executable, str(ROOT / words[1]), *words[2:]]
        return subprocess.run(words, cwd=self.cwd, timeout=300).returncode

    def stop(self) -> int:
        """SIGTERM to the server; its exit status (0: it stopped as asked), its whole group gone after."""
        import os
        import signal
        import subprocess

        if self.process is None:
            return 0
        process, self.process = self.process, None
        process.terminate()
        try:
            status = process.wait(90)
        except subprocess.TimeoutExpired:
            status = -1
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        return status


@pytest.mark.slow
def test_the_server_section_of_deploy_runs_as_written(tmp_path, monkeypatch, pose_run, seg_checkpoint):
    """docs/deploy.md's "Serve a model over HTTP" in a folder holding a pose export (``my-model``, a run's), a seg
    export (``my-seg``) and photos: each server started as written (ports swapped for free ones), asked with the
    page's curl and Python client commands, stopped with SIGTERM."""
    import sapiens2_ft

    shutil.copytree(pose_run[1]["export"], tmp_path / "my-model")
    sapiens2_ft.export(seg_checkpoint, tmp_path / "my-seg")
    write_photos(tmp_path / "photos")
    monkeypatch.chdir(tmp_path)
    servers, ran = DocServers(tmp_path), []
    try:
        for command in commands(*SERVE_SECTION):
            if not_run_here(command):
                continue
            words = shlex.split(command)
            if words[:2] == ["sapiens2-ft", "serve"]:
                status = servers.start(words)
            elif words[0] in ("curl", "python") and words[:2] != ["python", "-m"]:
                status = servers.run(words)
            else:
                status = run(command)
            assert status == 0, f"`{command}` exited with {status}"
            ran.append(command)
    finally:
        assert servers.stop() == 0, "a server did not stop on SIGTERM"
    assert sum(c.startswith("sapiens2-ft serve") for c in ran) >= 2 and sum(c.startswith("curl") for c in ran) >= 3
