"""``sapiens2-ft app --write_space DIR --model HUB_ID_OR_DIR``: a folder Hugging Face Spaces runs as it is (the Gradio
SDK): ``app.py`` starting this demo, ``requirements.txt``, ``README.md`` with the Space's metadata, the code of this
sapiens2-ft (``sapiens2_ft/`` and ``datamodules/``, so the Space runs the version that trained the model), and each
local ``--model`` (an export's own files; a checkpoint exported first) under ``models/``. A hub id stays a hub id:
the Space downloads it when it starts (a gated model needs an ``HF_TOKEN`` secret in the Space's settings)."""

from __future__ import annotations

import importlib.metadata
import sys
from pathlib import Path

import yaml

from datamodules.boundary.folders import files_under, handed_file
from datamodules.boundary.writes import copy_file, write_text
from datamodules.errors import BadInput, NotFound, Refused, RefusedInput
from sapiens2_ft.models.checkpoints import is_distributed_checkpoint
from sapiens2_ft.training.hf_export import export_checkpoint
from sapiens2_ft.training.export_dir import export_files
from sapiens2_ft.training.model_card import CARD_FILE, hub_id_of, public_card

PACKAGES = ("sapiens2_ft", "datamodules")
# Arguments of the app that name local files: a Space has only what the folder holds.
LOCAL_ONLY = ("--detector", "--boxes_from_seg", "--keypoints")
APP = '''"""A Hugging Face Space serving sapiens2-ft's web demo; written by `sapiens2-ft app --write_space`."""

from pathlib import Path

from sapiens2_ft.app.cli import main

HERE = Path(__file__).resolve().parent
MODELS = {models}  # local folders are relative to this file
main([arg for model in MODELS for arg in ("--model", str(HERE / model) if (HERE / model).exists() else model)]
     + {options})
'''


def space_options(argv: list[str]) -> list[str]:
    """The app's arguments to keep in the Space: all but ``--model``, ``--write_space``, ``--port`` and ``--host``
    (the Space serves where Spaces tells Gradio to)."""
    kept, skip = [], False
    for arg in argv:
        if skip:
            skip = False
            continue
        name = arg.split("=", 1)[0]
        if name in ("--model", "--write_space", "--port", "--host"):
            skip = "=" not in arg
            continue
        kept.append(arg)
    return kept


def copy_model(model: str, target: Path) -> str | None:
    """A local ``--model`` copied into ``target`` (an export's own files; a checkpoint exported); None for a hub id."""
    path = Path(model)
    if path.is_file() or is_distributed_checkpoint(path):
        export_checkpoint(path, target)
    elif (path / "config.json").is_file():
        target.mkdir(parents=True)
        for name in export_files(path):  # relative names, the export's own files (a link among them: refused)
            card = public_card(path) if name == CARD_FILE else None  # published: no command line, no machine names
            if card is not None:
                write_text(target, name, card)
            else:
                copy_file(handed_file(path, name), target, name)
    elif path.exists():
        raise BadInput(f"--model: {model} is neither an exported model directory nor a checkpoint")
    elif hub_id_of(model) is None:
        raise NotFound(f"--model: '{model}' does not exist (expected an exported directory, a checkpoint or a hub "
                       f"id 'user/name')")
    else:
        return None
    return target.name


def requirements() -> list[str]:
    """This installation's dependencies (its package metadata) and the Gradio running here."""
    import gradio

    try:
        needed = importlib.metadata.requires("sapiens2-ft") or []
    except importlib.metadata.PackageNotFoundError:
        raise NotFound("--write_space: sapiens2-ft is not installed (pip install -e . in the checkout), so its "
                       "dependencies are unknown") from None
    return [r for r in needed if "extra ==" not in r] + [f"gradio=={gradio.__version__}"]


def project_licence() -> list[Path]:
    """sapiens2-ft's own LICENSE and NOTICE: the checkout's, or those of the installed package's metadata."""
    checkout = Path(sys.modules["sapiens2_ft"].__file__).resolve().parents[1]
    found = [checkout / name for name in ("LICENSE", "NOTICE") if (checkout / name).is_file()]
    if found:
        return found
    try:
        files = importlib.metadata.distribution("sapiens2-ft").files or []
    except importlib.metadata.PackageNotFoundError:
        return []
    return [Path(f.locate()) for f in files if f.name in ("LICENSE", "NOTICE") and "licenses" in f.parts]


def write_space(out: Path, models: list[str], argv: list[str]) -> Path:
    """The Space folder ``out`` (refused when it exists and is not empty)."""
    import gradio

    if out.exists() and any(out.iterdir()):
        raise Refused(f"--write_space: {out} is not empty; give a new folder")
    options = space_options(argv)
    for name in LOCAL_ONLY:
        for k, arg in enumerate(options):
            value = arg.split("=", 1)[1] if arg.startswith(name + "=") else (
                options[k + 1] if arg == name and k + 1 < len(options) else None)
            if value is not None and Path(value).exists():
                raise BadInput(f"--write_space: {name} {value} is a local file; a Space has only its folder: give "
                               f"a hub id{', or pass it as --model' if name == '--boxes_from_seg' else ''}")
    for model in models:  # a handed export's links are refused before anything is written
        if (Path(model) / "config.json").is_file():
            try:
                export_files(Path(model))
            except RefusedInput as err:
                raise err.with_message(f"--write_space: --model {model}: {err}") from None
    out.mkdir(parents=True, exist_ok=True)
    entries = [copy_model(model, out / "models" / str(k)) for k, model in enumerate(models)]
    names = [f"models/{entry}" if entry else model for entry, model in zip(entries, models)]
    for package in PACKAGES:
        source = Path(sys.modules[package].__file__).parent
        for name in files_under(source):  # this installation's code (its links left out)
            if not any(part in ("__pycache__", "_shipped") for part in name.split("/")) and not name.endswith(".pyc"):
                copy_file(source / name, out / package, name)
    for licence in project_licence():  # the Apache-2.0 code goes with its licence
        copy_file(licence, out, f"{licence.name}-sapiens2-ft")
    write_text(out, "app.py", APP.format(models=repr(names), options=repr(options)))
    write_text(out, "requirements.txt", "\n".join(requirements()) + "\n")
    write_text(out, ".gitattributes", "".join(f"*.{ext} filter=lfs diff=lfs merge=lfs -text\n"
                                             for ext in ("safetensors", "onnx", "data", "png", "jpg")))
    hub_models = [m for m in models if hub_id_of(m)]
    meta = {"title": "Sapiens2 demo", "emoji": "🧍", "colorFrom": "indigo", "colorTo": "blue", "sdk": "gradio",
            "sdk_version": gradio.__version__, "python_version": f"{sys.version_info.major}.{sys.version_info.minor}",
            "app_file": "app.py", "pinned": False, "license": "other", **({"models": hub_models} if hub_models else {})}
    body = ("# Sapiens2 demo\n\nA web demo of Sapiens2 models fine-tuned with sapiens2-ft: a photo, a webcam frame "
            "or a video in, the pictures of the models' predictions and what they found (JSON) out. Models: "
            + ", ".join(f"`{n}`" for n in names) + ".\n\nThe models derive from Sapiens2 and are under the Sapiens2 "
            "License (each model folder has a copy, `LICENSE-sapiens2.md`); the code (`sapiens2_ft/`, "
            "`datamodules/`) is sapiens2-ft's, under the Apache License 2.0 (`LICENSE-sapiens2-ft`).\n")
    write_text(out, "README.md", "---\n" + yaml.safe_dump(meta, sort_keys=False, allow_unicode=True) + "---\n\n"
               + body)
    return out
