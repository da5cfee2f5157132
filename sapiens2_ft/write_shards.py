"""``python -m sapiens2_ft.write_shards --config X [--data.root DIR ...] --out DIR``: a config's training and
validation data as WebDataset tar shards, to train from a folder or object storage (``data.shards``).

Takes the same config files and overrides as ``train.py``: whatever the data module reads (a COCO json, a
converted export, a dense split, a ``data.train`` mix) is listed and checked as at the start of training, then
every file a sample reads is written into the shards byte for byte, with an index of the samples. Training from
``--data.shards DIR`` (or the URL the folder is uploaded to) then sees the same samples, shard by shard.
"""

from __future__ import annotations

import sys
from pathlib import Path

from jsonargparse.typing import PositiveFloat, PositiveInt

from sapiens2_ft.compat import cli_value
from sapiens2_ft.exits import console_command
from sapiens2_ft.training.cli import Sapiens2CLI, resolve_config_args, short_help, task_of
from sapiens2_ft.training.config_safety import check_class_paths


OPTIONS = [  # this command's own, beside the training config's keys
    (("--out",), {"required": True, "help": "New or empty folder of the shards and their index"}),
    (("--shard_mb",), {"type": PositiveFloat, "default": 1024.0,
                       "help": "Most MiB a shard holds (about a second's download each on a fast link; default 1024)"}),
    (("--shard_samples",), {"type": PositiveInt, "default": 10_000,
                            "help": "Most samples a shard holds (default 10000)"}),
]


class ShardsCLI(Sapiens2CLI):
    """Parses a training config like ``train.py`` (plus the shard options) but builds only the DataModule."""

    def add_arguments_to_parser(self, parser) -> None:
        super().add_arguments_to_parser(parser)
        for flags, keywords in OPTIONS:
            parser.add_argument(*flags, **keywords)

    def before_instantiate_classes(self) -> None:
        check_class_paths(self.config.as_dict())

    def instantiate_classes(self) -> None:
        self.config_init = self.parser.instantiate_classes(self.config)
        self.datamodule = cli_value(self, self.config_init, "data")
        self.model = cli_value(self, self.config_init, "model")


@console_command
def main(argv: list[str] | None = None) -> int:
    from datamodules.errors import BadConfig, DataError
    from datamodules.shards.writer import write_shards

    argv = sys.argv[1:] if argv is None else argv
    short_help(argv, "python -m sapiens2_ft.write_shards", __doc__.split("\n\n")[0].replace("``", ""), OPTIONS)
    argv = resolve_config_args(argv)
    cli = ShardsCLI(task_of(argv), args=argv, run=False, seed_everything_default=0, auto_configure_optimizers=False)
    data, out = cli.datamodule, Path(cli_value(cli, cli.config, "out"))
    if data.store is not None:
        raise BadConfig("write_shards: the config reads shards already (data.shards); give the dataset it came "
                        "from")
    try:
        data.prepare_data()  # the demo configs render their synthetic data first
        data.setup("fit")
        splits, copies, meta = data.shard_splits()
        index = write_shards(out, splits, copies, meta, cli_value(cli, cli.config, "shard_mb"),
                             cli_value(cli, cli.config, "shard_samples"))
    except DataError as err:
        raise err.with_message(f"write_shards: {err}") from None
    counts = ", ".join(f"{split} {sum(index['parts'][p['key']]['entries'] for p in parts)}"
                       for split, parts in index["splits"].items())
    print(f"wrote {len(index['shards'])} shards ({index['bytes'] / 2**30:.2f} GiB; entries: {counts}) and their index "
          f"to {out}\ntrain from them: add --data.shards {out} (or the URL of the folder once uploaded) to the "
          "training command")
    return 0


if __name__ == "__main__":
    sys.exit(main())
