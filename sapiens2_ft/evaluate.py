"""``python -m sapiens2_ft.evaluate --config RECIPE --model MODEL [--out DIR] [--data.* ...]``: score any model on a
recipe's validation split, exactly as training validates.

``--model`` is a training checkpoint (``.ckpt`` or a distributed checkpoint directory: its recorded module
settings are used), an exported model directory or a hub id (the recipe's ``model.*`` settings are used, with
the given weights). The recipe gives the data and the metric; its ``--data.*`` / ``--model.*`` overrides apply
as in ``train.py``. ``data.input_size`` defaults to the model's own. Pose crops the annotation file's boxes, the
boxes of ``--boxes FILE`` (COCO detections json, as ``--data.val_detections``) or those ``--detector`` finds.

Writes into ``--out`` (default ``eval/<config>``): ``metrics.json`` (the val metrics, the model, the step),
the task's predictions (pose ``predictions.json`` in the COCO results format; dense ``predictions/``),
``diagnostics/`` (per-keypoint or per-class tables and charts) and ``panels/`` (truth beside prediction). An exported
directory's model card gets these metrics (``training/model_card.py``: its results on this data folder replaced).
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path

import lightning as L
import torch

from datamodules.boundary.writes import write_image, write_json
from datamodules.errors import BadConfig, BadInput, NotFound, Refused, RefusedInput, restated
from sapiens2_ft.check_data import DataCheckCLI
from sapiens2_ft.exits import console_command
from sapiens2_ft.models.checkpoints import CheckpointError, is_distributed_checkpoint, read_info
from sapiens2_ft.predict.loading import model_problem, resolve_model
from sapiens2_ft.problems import Problems
from sapiens2_ft.tasks.registry import task_of_config
from sapiens2_ft.tasks.saved_model import exported_input_size
from sapiens2_ft.training.callbacks.diagnostics import write_diagnostics
from sapiens2_ft.training.config_safety import check_recipe_files
from sapiens2_ft.training.cli import resolve_config_args, task_of
from sapiens2_ft.training.model_card import dataset_entry, refresh_results
from sapiens2_ft.training.run_dir import run_name

PANELS = 4  # validation samples drawn into panels/


def is_checkpoint(model: str) -> bool:
    path = Path(model)
    return path.is_file() or is_distributed_checkpoint(path)


def model_input_size(model: str) -> list[int]:
    """(H, W) the model was trained or exported at."""
    if is_checkpoint(model):
        try:
            return list(read_info(model).hyper_parameters.get("input_size") or (256, 192))
        except CheckpointError as err:
            raise err.with_message(f"--model: {err}") from None
    from transformers import Sapiens2Config

    directory = resolve_model(model)
    return exported_input_size(directory, Sapiens2Config.from_pretrained(directory, trust_remote_code=False))


def sets(argv: list[str], key: str) -> bool:
    return any(a == key or a.startswith(key + "=") for a in argv)


def evaluation_arguments(recipe_module, model: str) -> tuple[dict, int | None]:
    """The arguments of the recipe's task module with ``model``'s weights, and the checkpoint's step: a checkpoint's
    own settings and all its weights (``init_from``), or the recipe's settings around an exported / hub model
    (``pretrained``). A model that does not fit the recipe is an error naming ``--model``."""
    module_class = type(recipe_module)
    kwargs = {k: v for k, v in recipe_module.hparams.items() if not k.startswith("_")}  # not the CLI's own
    if is_checkpoint(model):
        try:
            info = read_info(model)
        except CheckpointError as err:
            raise err.with_message(f"evaluate: {err}") from None
        if info.task != recipe_module.task:
            raise BadInput(f"--model: {model} is a {info.task} checkpoint; the config trains {recipe_module.task}")
        kwargs.update({k: v for k, v in info.hyper_parameters.items() if not k.startswith("_")})
        kwargs.update(init_from=str(model), pretrained=None)
        return kwargs, info.global_step
    from transformers import Sapiens2Config

    directory = resolve_model(model)
    config = Sapiens2Config.from_pretrained(directory, trust_remote_code=False)
    architecture = (config.architectures or ["Sapiens2Model"])[0]
    task = task_of_config(config)
    if task != recipe_module.task:
        raise BadInput(f"--model: {model} holds a {architecture} ({task or 'no task'} model); the config trains "
                       f"{recipe_module.task}")
    label_arg = recipe_module.spec.model.label_arg  # the recipe's labels, each the model's row of the same name
    labels = (kwargs.get(label_arg) or list(recipe_module.labels)) if label_arg else None
    try:
        options = module_class.options_from_model(directory, config, labels)
    except ValueError as err:
        raise BadInput(f"--model: {err}. Evaluate with the model's label set (--data.keypoints / "
                       f"--data.class_names)") from None
    kwargs.update(pretrained=str(directory), init_from=None, pretraining_head=False, **options)
    return kwargs, None


def checked_arguments(args, rest: list[str]) -> list[str]:
    """``rest`` with its config names resolved, after every problem of the arguments is reported at once."""
    problems = Problems([model_problem(args.model)] if model_problem(args.model) else [])
    problems.check(any(a == "--config" or a.startswith("--config=") for a in rest),
                   "--config: give the recipe whose data and metric to evaluate with")
    try:
        rest = resolve_config_args(rest)
        check_recipe_files(rest)  # a recipe naming code it may not run: refused before anything is imported
    except (BadConfig, NotFound, Refused) as err:  # a recipe missing, not plain YAML, naming code
        problems.append(str(err))
    problems.check(not (args.boxes and args.detector), "give one of --boxes and --detector")
    problems.check(not args.boxes or Path(args.boxes).is_file(), f"--boxes: '{args.boxes}' is not a file")
    problems.check(0 <= args.det_threshold <= 1, f"--det_threshold: the minimum person score is between 0 and 1, "
                                                 f"got {args.det_threshold}")
    problems.raise_any()
    return rest


def detector_boxes(args, rest: list[str], out: Path) -> list[str]:
    """``rest`` with ``--data.val_detections`` set to the boxes of ``--boxes`` or of ``--detector``."""
    if args.boxes:
        return [*rest, "--data.val_detections", str(Path(args.boxes).resolve())]
    if args.detector:
        from sapiens2_ft import detect

        found = detect.main([*rest, "--detector", args.detector, "--det_threshold", str(args.det_threshold),
                             "--out", str(out / "val_detections.json"), "--device", args.device])
        return [*rest, "--data.val_detections", str(Path(found).resolve())]
    return rest


def write_outputs(module, out: Path, summary: dict) -> None:
    write_json(out, "metrics.json", summary, indent=2)
    module.write_validation_outputs(out)
    write_diagnostics(out / "diagnostics", module.validation_diagnostics())
    for name, pictures in module.validation_panels(PANELS).items():
        for i, picture in enumerate(pictures):
            write_image(out, f"panels/{name}_{i}.png", picture[..., ::-1])


@console_command
def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m sapiens2_ft.evaluate", description=__doc__.split("\n\n")[0],
                                     allow_abbrev=False)
    parser.add_argument("--model", required=True,
                        help="a training checkpoint (.ckpt or distributed checkpoint dir), an exported model "
                             "directory or a hub id")
    parser.add_argument("--out", default=None, help="output folder (default: eval/<config name>)")
    parser.add_argument("--boxes", default=None, help="pose: a COCO detections json of person boxes to crop")
    parser.add_argument("--detector", default=None, help="pose: a person detector (hub id or directory) for the boxes")
    parser.add_argument("--det_threshold", type=float, default=0.5, help="--detector: minimum person score")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--precision", default="32-true", choices=["32-true", "bf16-mixed"],
                        help="compute precision (bf16-mixed: faster on GPUs and CPUs with bf16, slightly other scores)")
    args, rest = parser.parse_known_args(sys.argv[1:] if argv is None else argv)
    rest = checked_arguments(args, rest)
    out = Path(args.out) if args.out else Path("eval") / run_name([a for a in rest if a.endswith(".yaml")])
    if not sets(rest, "--data.input_size"):
        rest += ["--data.input_size", json.dumps(model_input_size(args.model))]
    task = task_of(rest)
    rest = detector_boxes(args, rest, out)
    warnings.filterwarnings("ignore", message="LightningCLI's args parameter is intended")
    cli = DataCheckCLI(task, args=rest, run=False, seed_everything_default=0, auto_configure_optimizers=False)
    data = cli.datamodule
    kwargs, step = evaluation_arguments(cli.model, args.model)
    try:
        module = type(cli.model)(**kwargs)
        module.configure_model()
        data.prepare_data()
        data.setup("validate")
    except (CheckpointError, FileNotFoundError, ValueError) as err:
        raise restated(err, f"evaluate: {err}", NotFound if isinstance(err, OSError) else BadInput) from None
    samples = len(data.val_dataloader().dataset)
    if samples == 0 and (args.boxes or args.detector):
        why = "the --boxes file lists none" if args.boxes else \
            f"the detector found none above --det_threshold {args.det_threshold}"
        raise BadInput(f"evaluate: no person box to crop in the validation images of {cli.config.data.get('root')} "
                       f"({why})")
    if samples == 0:
        raise BadInput(f"evaluate: the validation split of {cli.config.data.get('root')} has no samples")
    device = torch.device(args.device)
    trainer = L.Trainer(accelerator="gpu" if device.type == "cuda" else "cpu", devices=1, logger=False,
                        enable_checkpointing=False, precision=args.precision, default_root_dir=str(out))
    metrics = trainer.validate(module.to(device), datamodule=data, verbose=False)[0]
    summary = {"task": task, "model": args.model, "step": step, "samples": samples, "precision": args.precision,
               "input_size": list(module.hparams.input_size),
               "metrics": {k.removeprefix("val/"): float(v) for k, v in metrics.items()}}
    write_outputs(module, out, summary)
    if Path(args.model, "config.json").is_file():  # a local export (not the hub cache): its card's results
        boxes = "detected boxes" if args.boxes or args.detector else None
        try:
            refresh_results(Path(args.model), task, summary["metrics"],
                            dataset_entry(cli.config.data.get("root"), boxes))
        except RefusedInput as err:  # a card that is a link is neither read nor written through
            print(f"evaluate: the model card was not updated: {err}", file=sys.stderr)
    print(f"{task} on {samples} validation samples: "
          + "  ".join(f"{k}={v:.4f}" for k, v in summary["metrics"].items()) + f"\nwritten to {out}")
    return summary


if __name__ == "__main__":
    main()
