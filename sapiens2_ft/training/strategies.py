"""FSDP2 as a one-line strategy choice (``trainer.strategy: sapiens2_ft.training.strategies.FSDP2Strategy``)."""

from __future__ import annotations

import shutil
from pathlib import Path

from lightning.pytorch.strategies import ModelParallelStrategy

from sapiens2_ft.compat import set_data_parallel_size
from sapiens2_ft.training.checkpoint_io import checkpoint_bytes, save_together, swap_in_directory


class FSDP2Strategy(ModelParallelStrategy):
    """Lightning's ``ModelParallelStrategy`` with every process in one data-parallel (FSDP2) group.

    The modules' ``configure_model`` shards each transformer block and the root over it
    (``sapiens2_ft.models.sharding``). Checkpoints are distributed (one shard file per rank, a
    directory) written as ``NAME.partial`` and swapped in once every rank has finished, so a crash
    while saving keeps the previous checkpoint; they resume with ``--resume``.
    ``save_distributed_checkpoint: false`` writes a single consolidated file from rank 0 instead.
    A save that fails on one rank (a full disk) fails on every rank with the same message, its partial
    directory removed.
    """

    agrees_on_failed_saves = True  # see checkpoint_io.agree_on_failed_saves

    def __init__(self, save_distributed_checkpoint: bool = True, process_group_backend: str | None = None,
                 timeout_s: float = 1800.0):
        from datetime import timedelta

        super().__init__(data_parallel_size="auto", tensor_parallel_size=1,
                         save_distributed_checkpoint=save_distributed_checkpoint,
                         process_group_backend=process_group_backend, timeout=timedelta(seconds=timeout_s))
        self.distributed_checkpoint = save_distributed_checkpoint

    def setup_environment(self) -> None:
        set_data_parallel_size(self, self.num_nodes * self.num_processes)
        super().setup_environment()

    def save_checkpoint(self, checkpoint: dict, filepath, storage_options=None) -> None:
        save = super().save_checkpoint
        if not self.distributed_checkpoint:  # rank 0 writes the gathered state
            size = checkpoint_bytes(checkpoint) if self.global_rank == 0 else 0
            return save_together(self, Path(filepath), lambda: save(checkpoint, filepath, storage_options), size)
        path = Path(self.broadcast(str(filepath)))
        partial = path.with_name(path.name + ".partial")
        if self.global_rank == 0 and partial.exists():
            shutil.rmtree(partial)  # left by a crash during an earlier save
        self.barrier("checkpoint_start")
        try:  # every rank writes its shards; all learn together whether one failed
            save_together(self, path, lambda: save(checkpoint, partial, storage_options), checkpoint_bytes(checkpoint))
        except Exception:
            if self.global_rank == 0 and partial.exists():
                shutil.rmtree(partial, ignore_errors=True)
            raise
        if self.global_rank == 0:
            swap_in_directory(partial, path)
        self.barrier("checkpoint_swapped")
