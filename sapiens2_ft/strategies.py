"""FSDP2 as a one-line strategy choice (``trainer.strategy: sapiens2_ft.strategies.FSDP2Strategy``)."""

from __future__ import annotations

from lightning.pytorch.strategies import ModelParallelStrategy


class FSDP2Strategy(ModelParallelStrategy):
    """Lightning's ``ModelParallelStrategy`` with every process in one data-parallel (FSDP2) group.

    The modules' ``configure_model`` shards each transformer block and the root over it
    (``sapiens2_ft.models.sharding``). Checkpoints are distributed (one shard file per rank, a
    directory) and resume with any ``--ckpt_path``; ``save_distributed_checkpoint: false`` writes a
    single consolidated file from rank 0 instead.
    """

    def __init__(self, save_distributed_checkpoint: bool = True, process_group_backend: str | None = None,
                 timeout_s: float = 1800.0):
        from datetime import timedelta

        super().__init__(data_parallel_size="auto", tensor_parallel_size=1,
                         save_distributed_checkpoint=save_distributed_checkpoint,
                         process_group_backend=process_group_backend, timeout=timedelta(seconds=timeout_s))

    def setup_environment(self) -> None:
        self._data_parallel_size = self.num_nodes * self.num_processes
        super().setup_environment()
