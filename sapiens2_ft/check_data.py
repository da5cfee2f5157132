"""``python -m sapiens2_ft.check_data --config X [--data.root DIR ...]``: check every sample of the configured
train and val splits before spending GPU hours on them.

Takes the same config files and overrides as ``train.py``. Lists every problem (file, record, field, what
was expected) grouped with counts, then exits with status 1 when any is fatal (0 otherwise). Checked:
files exist and decode; COCO schema (required lists and keys, unique image and annotation ids, known image
and category ids, keypoint count of the keypoint set, visibility flags in {0, 1, 2}, boxes with positive
size inside the image); dense targets of the image's size, labels within the class set or the ignore
index, normals finite and of unit length, depth finite and positive, 3x3 intrinsics with positive focals.
A lighter check (no decoding) runs at the start of every fit.

``--show N [--out DIR]``: after the check, ``DIR/data_check.png`` (default: the current directory), a sheet of
the first N training samples as the training loader yields them (augmented; the first batches of a run with
the same seed), with their targets drawn (``sapiens2_ft/tasks/sample_sheet.py``).
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

from jsonargparse.typing import NonNegativeInt

from datamodules.errors import BadConfig, BadInput, DataError
from sapiens2_ft.compat import cli_value
from sapiens2_ft.exits import console_command
from sapiens2_ft.problems import ConfigProblems
from sapiens2_ft.tasks.sample_sheet import SHEET_FILE, data_sheet, sheet_labels, split_batch, write_sheet
from sapiens2_ft.training.cli import Sapiens2CLI, config_problems, resolve_config_args, short_help, task_of
from sapiens2_ft.training.config_safety import check_parsed_recipe


OPTIONS = [  # this command's own, beside the training config's keys
    (("--show",), {"type": NonNegativeInt, "default": 0, "metavar": "N",
                   "help": f"After the check, draw this many augmented training samples with their targets into "
                           f"OUT/{SHEET_FILE} (0: no sheet)"}),
    (("--out",), {"default": ".", "help": f"Folder of {SHEET_FILE} (default: the current directory)"}),
]


class DataCheckCLI(Sapiens2CLI):
    """Parses a training config like ``train.py`` (plus ``--show`` and ``--out``) but builds only the DataModule."""

    def add_arguments_to_parser(self, parser) -> None:
        super().add_arguments_to_parser(parser)
        for flags, keywords in OPTIONS:
            parser.add_argument(*flags, **keywords)

    def before_instantiate_classes(self) -> None:
        check_parsed_recipe(self.config.as_dict())
        out = cli_value(self, self.config, "out")
        problems = [f"--out {out}: a file; give the folder of {SHEET_FILE}"] if Path(out or ".").is_file() else []
        problems += config_problems(self.config, self.model_class)  # the config's, as train.py reports them
        if problems:
            raise ConfigProblems(problems)

    def instantiate_classes(self) -> None:
        instantiate = getattr(self.parser, "instantiate", None) or self.parser.instantiate_classes  # jsonargparse 4.49
        self.config_init = instantiate(self.config)
        self.datamodule = cli_value(self, self.config_init, "data")
        self.model = cli_value(self, self.config_init, "model")


def loader_items(loader, count: int) -> list[dict]:
    """The first ``count`` items of ``loader``'s first pass, loaded and collated as the loader does it (its
    batch sampler's keys, its dataset, its collate function), then split into items again."""
    items = []
    for keys in loader.batch_sampler:
        batch = loader.collate_fn([loader.dataset[key] for key in keys[:count - len(items)]])
        items += split_batch(batch, count - len(items))
        if len(items) >= count:
            break
    return items


def write_data_sheet(cli: DataCheckCLI, count: int, out: str) -> Path:
    """``out/data_check.png`` of the first ``count`` training samples."""
    data = cli.datamodule
    with warnings.catch_warnings():  # its start-of-fit check found what the report above says: said once
        warnings.filterwarnings("ignore", message="the data check found problems")
        data.setup("fit")
    loader = data.train_dataloader()
    items = loader_items(loader, count)
    if not items:
        raise BadConfig(f"--show: the training loader yields no batch ({len(loader.dataset)} samples, "
                        f"batch size {loader.batch_size}, the last partial batch dropped)")
    try:
        sheet = data_sheet(cli.task.name, items, sheet_labels(data))
    except ValueError as err:
        raise BadInput(f"--show: {err}") from None
    path = write_sheet(sheet, Path(out) / SHEET_FILE)
    print(f"data sheet of {len(items)} augmented training samples: {path}")
    return path


@console_command
def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    short_help(argv, "python -m sapiens2_ft.check_data", __doc__.split("\n\n")[0].replace("``", ""), OPTIONS)
    argv = resolve_config_args(argv)
    warnings.filterwarnings("ignore", message="LightningCLI's args parameter is intended")  # as train.py
    cli = DataCheckCLI(task_of(argv), args=argv, run=False, seed_everything_default=0,
                       auto_configure_optimizers=False)
    if cli.datamodule.store is not None:
        raise BadConfig("check_data reads dataset files: leave out data.shards (shards are written from checked "
                        "data)")
    try:
        cli.datamodule.prepare_data()  # the demo configs render their synthetic data first
        report = cli.datamodule.check(decode=True)
    except DataError as err:
        raise err.with_message(f"check_data: {err}") from None
    print(report.format())
    if report.fatal:
        print(f"{len(report.fatal)} fatal problems: fix them, or train with data.on_bad_sample: skip")
    show = cli_value(cli, cli.config, "show")
    if show and report.fatal:
        print("--show: no data sheet while fatal problems remain")
    elif show:
        write_data_sheet(cli, show, cli_value(cli, cli.config, "out"))
    return 1 if report.fatal else 0


if __name__ == "__main__":
    sys.exit(main())
