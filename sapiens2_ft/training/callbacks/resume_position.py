"""A resumed run continues its data where the checkpoint left it: the same epoch's order, at the next batch."""

from __future__ import annotations

import warnings
from dataclasses import asdict

import lightning as L
from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn

from datamodules.base import SampleDataModule
from datamodules.loaders import TrainPosition
from sapiens2_ft.compat import rebuild_train_loader
from sapiens2_ft.models.checkpoints import CheckpointError

POSITION_KEY = "train_data_position"  # checkpoint entry: {"epoch": ..., "batches": ...}


def trained_position(trainer: L.Trainer) -> TrainPosition:
    """The epoch in training and the batches of it already trained; at an epoch's end, the next epoch at 0.
    ``processed``, not ``completed``: a checkpoint written in ``on_train_batch_end`` (StepCheckpoint) has not
    yet counted its batch as completed."""
    done = trainer.fit_loop.epoch_loop.batch_progress.current.processed
    if done >= trainer.num_training_batches:
        return TrainPosition(trainer.current_epoch + 1, 0)
    return TrainPosition(trainer.current_epoch, done)


def read_position(entry) -> TrainPosition:
    """The checkpoint's ``train_data_position`` entry, or a CheckpointError saying what is wrong with it."""
    try:
        return TrainPosition(int(entry["epoch"]), int(entry["batches"]))
    except (KeyError, TypeError, ValueError) as err:
        raise CheckpointError(f"the checkpoint's '{POSITION_KEY}' entry must be {{'epoch': int >= 0, 'batches': "
                              f"int >= 0}}, got {entry!r} ({err})") from None


class ResumeDataPosition(L.Callback):
    """Saves the training position (:func:`trained_position`) in every checkpoint and hands it to the data module
    on resume, so that its train loader is built there.

    Lightning restores the step, the loop position and the optimiser, but replays a plain loader's epoch from its
    start. ``EpochSeededSampler`` draws an epoch's order from the seed and the epoch alone, and each process takes
    its own share of it, so a loader that starts at the saved position yields exactly the batches an uninterrupted
    run would. The position must be in place before the loader is first iterated: a loader with workers draws its
    first indices then, and Lightning iterates it before ``on_train_start`` and before it sets the epoch. The
    checkpoint is restored before the loader is built, except under strategies that restore after their setup
    (FSDP2) when the optimiser's schedule asked for the loader's length: that early loader is built again.
    """

    def on_save_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict) -> None:
        checkpoint[POSITION_KEY] = asdict(trained_position(trainer))

    def on_load_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict) -> None:
        datamodule = trainer.datamodule
        if trainer.state.fn != TrainerFn.FITTING or not isinstance(datamodule, SampleDataModule):
            return
        if POSITION_KEY not in checkpoint:
            rank_zero_warn(f"the checkpoint has no '{POSITION_KEY}' (written by an older version): the restored "
                           "epoch's data starts again from its beginning")
            return
        position = read_position(checkpoint[POSITION_KEY])
        datamodule.start_training_at(position)
        rank_zero_info(f"the training data continues at epoch {position.epoch}, batch {position.batches}")
        # Lightning warns that a plain loader replays a part-trained epoch from its start; this one does not.
        warnings.filterwarnings("ignore", message="You're resuming from a checkpoint that ended before the epoch")
        if trainer.train_dataloader is not None:  # built before the restore
            rebuild_train_loader(trainer)
