"""``python -m sapiens2_ft.check_data --config X [--data.root DIR ...]``: check every sample of the configured
train and val splits before spending GPU hours on them.

Takes the same config files and overrides as ``train.py``. Lists every problem (file, record, field, what
was expected) grouped with counts, then exits with status 1 when any is fatal (0 otherwise). Checked:
files exist and decode; COCO schema (required lists and keys, unique image and annotation ids, known image
and category ids, keypoint count of the keypoint set, visibility flags in {0, 1, 2}, boxes with positive
size inside the image); dense targets of the image's size, labels within the class set or the ignore
index, normals finite and of unit length, depth finite and positive, 3x3 intrinsics with positive focals.
A lighter check (no decoding) runs at the start of every fit.
"""

from __future__ import annotations

import sys

from sapiens2_ft.compat import cli_value
from sapiens2_ft.training.cli import Sapiens2CLI, resolve_config_args, task_of
from sapiens2_ft.training.config_safety import check_class_paths


class DataCheckCLI(Sapiens2CLI):
    """Parses a training config like ``train.py`` but builds only the DataModule."""

    def before_instantiate_classes(self) -> None:
        check_class_paths(self.config.as_dict())

    def instantiate_classes(self) -> None:
        self.config_init = self.parser.instantiate_classes(self.config)
        self.datamodule = cli_value(self, self.config_init, "data")
        self.model = cli_value(self, self.config_init, "model")


def main(argv: list[str] | None = None) -> int:
    argv = resolve_config_args(sys.argv[1:] if argv is None else argv)
    cli = DataCheckCLI(task_of(argv), args=argv, run=False, seed_everything_default=0,
                       auto_configure_optimizers=False)
    cli.datamodule.prepare_data()  # the demo configs render their synthetic data first
    report = cli.datamodule.check(decode=True)
    print(report.format())
    if report.fatal:
        print(f"{len(report.fatal)} fatal problems: fix them, or train with data.on_bad_sample: skip")
    return 1 if report.fatal else 0


if __name__ == "__main__":
    sys.exit(main())
