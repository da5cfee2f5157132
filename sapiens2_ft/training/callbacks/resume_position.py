"""After a resume from a checkpoint in the middle of an epoch, training continues at the next batch."""

from __future__ import annotations

import lightning as L

from datamodules.loaders import EpochSeededSampler


class ResumeDataPosition(L.Callback):
    """Tells the training sampler how many samples of the restored epoch were already trained.

    Lightning restores the step, the loop position and the optimiser, but replays a plain loader's epoch
    from its start. With ``EpochSeededSampler`` (the epoch's order depends on the seed and the epoch only,
    and each process takes its own share of it) the resumed run sees exactly the batches an uninterrupted
    run would.
    """

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # After restoring and before the restored epoch's loader is iterated (a resumed epoch does not
        # call on_train_epoch_start again).
        loop = trainer.fit_loop
        if not loop.restarting:
            return
        loader = trainer.train_dataloader
        sampler = getattr(loader, "sampler", None)
        # `processed`, not `completed`: a checkpoint written in on_train_batch_end (StepCheckpoint) has not yet
        # counted its last batch as completed; Lightning makes up for that only later, in the epoch loop's reset.
        done = loop.epoch_loop.batch_progress.current.processed
        if isinstance(sampler, EpochSeededSampler) and 0 < done < trainer.num_training_batches:
            sampler.skip(done * loader.batch_size)
