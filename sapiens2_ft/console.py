"""``sapiens2-ft COMMAND [ARGS ...]``: one console command for every entry point (docs/install.md).

Each subcommand hands its arguments unchanged to the ``main(argv)`` of today's entry point, so
``sapiens2-ft predict --model M --input I --out O`` is ``python -m sapiens2_ft.predict --model M ...`` and
``sapiens2-ft train --config pose_demo.yaml`` is ``python train.py --config pose_demo.yaml``. A subcommand's
module is imported only when it runs: ``sapiens2-ft --help`` loads nothing but this file.
"""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass

from datamodules.errors import NotFound
from sapiens2_ft.exits import console_command


@dataclass(frozen=True)
class Command:
    modules: tuple[str, ...]  # the first of these that exists holds ``main(argv)``
    summary: str


COMMANDS: dict[str, Command] = {
    "train": Command(("sapiens2_ft.training.cli",), "fine-tune a model from a recipe (--list-configs lists them)"),
    "predict": Command(("sapiens2_ft.predict.cli",), "run a fine-tuned model on images, folders or videos"),
    "evaluate": Command(("sapiens2_ft.evaluate",), "score a checkpoint, export or hub model on a config's val split"),
    "export": Command(("sapiens2_ft.export",), "a training checkpoint as a Hugging Face model directory"),
    "check-data": Command(("sapiens2_ft.check_data",), "check every sample of a config's data before training"),
    "write-shards": Command(("sapiens2_ft.write_shards",), "a config's data as tar shards (data.shards)"),
    "memory": Command(("sapiens2_ft.memory",), "memory per device of a config, before launch"),
    "detect": Command(("sapiens2_ft.detect",), "person boxes for a pose config's validation images"),
    "convert": Command(("sapiens2_ft.convert.__main__",),
                       "an annotation tool's export in the layouts the recipes read"),
    "pseudo-labels": Command(("sapiens2_ft.pseudo_labels",),
                             "a model's sure predictions on unlabelled images as a data set to train on"),
    "select": Command(("sapiens2_ft.labelling.select",),
                      "the unlabelled images a model is least sure of, to label next"),
    "label-config": Command(("sapiens2_ft.labelling.config",),
                            "the labelling config (Label Studio) or labels (CVAT) of a model's keypoints or classes"),
    "app": Command(("sapiens2_ft.app.cli",), "a web demo of fine-tuned models, or a Space serving it (Gradio)"),
    "serve": Command(("sapiens2_ft.serve.cli",), "an HTTP service of fine-tuned models (LitServe)"),
}


def usage() -> str:
    width = max(len(name) for name in COMMANDS)
    lines = ["usage: sapiens2-ft COMMAND [ARGS ...]   (sapiens2-ft COMMAND --help: the command's arguments)",
             "", "Fine-tune Sapiens2 models and run them (docs/install.md).", "", "commands:"]
    lines += [f"  {name:<{width}}  {command.summary}" for name, command in COMMANDS.items()]
    return "\n".join(lines)


def entry_point(name: str):
    """The ``main`` of subcommand ``name``; NotFound naming the module when it is not installed."""
    command = COMMANDS[name]
    for module_name in command.modules:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as err:
            # the module (or its package) itself is missing, not a dependency it imports
            if err.name is not None and (module_name + ".").startswith(err.name + "."):
                continue
            raise
        if hasattr(module, "main"):
            return module.main
    raise NotFound(f"sapiens2-ft {name}: not available in this installation (no main() in "
                   f"{' or '.join(command.modules)}); upgrade sapiens2-ft")


@console_command
def main(argv: list[str] | None = None) -> int:
    """Dispatch ``argv`` (default ``sys.argv[1:]``); returns the exit status."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        return 0 if argv else 2
    if argv[0] in ("-V", "--version"):
        from importlib.metadata import PackageNotFoundError, version

        try:
            print(f"sapiens2-ft {version('sapiens2-ft')}")
        except PackageNotFoundError:
            print("sapiens2-ft (not installed: running from a checkout)")
        return 0
    name, args = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"sapiens2-ft: unknown command '{name}'\n\n{usage()}", file=sys.stderr)
        return 2
    if name == "train" and "--list-configs" in args:  # what train.py prints, without loading Lightning first
        from sapiens2_ft.resources import format_config_list

        print(format_config_list())
        return 0
    result = entry_point(name)(args)
    return result if isinstance(result, int) and not isinstance(result, bool) else 0


if __name__ == "__main__":
    sys.exit(main())
