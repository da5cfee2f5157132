"""A short fit of a tiny segmentation model on fixed in-memory data, for the distributed tests.

Every run starts from the same weights (``RUNS/init``, written by the first run) and sees the same
global batches (sequential sampling; with N ranks, rank r takes samples r, r + N, ...).

``python tests/distributed_fit.py --out RUNS/NAME --devices N --strategy {single,ddp,fsdp2} --steps K
[--stop_after J] [--resume CKPT] [--checkpointing EVERY] [--lora RANK] [--freeze MODE] [--compile BACKEND]
[--precision P] [--frozen_dtype D] [--task multitask --data_root DIR]`` writes ``RUNS/NAME/result.json``: the
global-batch mean loss of every step (averaged over ranks), and per rank the number of parameter
elements it holds locally and in total. The tests call ``main(argv)`` in forks of tests/forked.py (each rank through
``forked.as_rank``); run as a script, Lightning launches the other ranks.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import lightning as L
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset

from sapiens2_ft.tasks.multitask.module import MultiTaskModule
from sapiens2_ft.tasks.registry import build_task_model
from sapiens2_ft.tasks.seg.module import SegmentationModule
from sapiens2_ft.training.strategies import FSDP2Strategy

SIZE = (64, 48)
CLASSES = ["a", "b", "c", "d"]
GLOBAL_BATCH = 4
MULTITASK_SIZE = (128, 96)  # the smallest input the pointmap head's scale branch takes


class FixedData(Dataset):
    """64 items cycling through the same GLOBAL_BATCH samples: every step sees the same global batch,
    so a run resumed mid-epoch (its loader restarts) continues exactly where it stopped."""

    def __len__(self) -> int:
        return 64

    def __getitem__(self, i: int) -> dict:
        g = torch.Generator().manual_seed(i % GLOBAL_BATCH)
        return {"image": torch.randint(0, 256, (3, *SIZE), generator=g, dtype=torch.uint8),
                "labels": torch.randint(0, 4, SIZE, generator=g), "name": f"{i:03d}"}


class FixedBatches(L.LightningDataModule):
    """Rank r of N gets samples r, r + N, r + 2N, ... in order: the N per-rank batches of a step are
    together the single-process batch of that step."""

    def train_dataloader(self) -> DataLoader:
        rank, world = self.trainer.global_rank, self.trainer.world_size
        return DataLoader(FixedData(), batch_size=GLOBAL_BATCH // world, sampler=range(rank, len(FixedData()), world))


class Record(L.Callback):
    """Records the global-batch loss of every step; stops the fit after ``stop_after`` steps."""

    def __init__(self, stop_after: int | None = None):
        self.losses: list[float] = []
        self.stop_after = stop_after

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if self.stop_after is not None and trainer.global_step >= self.stop_after:
            trainer.should_stop = True
        loss = outputs["loss"].detach().clone()
        if dist.is_available() and dist.is_initialized():
            dist.all_reduce(loss)
            loss /= dist.get_world_size()
        self.losses.append(loss.item())


class MultiTaskBatches(L.LightningDataModule):
    """The multi-task pretraining's validation samples of a synthetic dataset (``root``), split over the ranks as
    ``FixedBatches`` splits its samples."""

    def __init__(self, root: str):
        super().__init__()
        self.root = root

    def train_dataloader(self) -> DataLoader:
        from sapiens2_ft.tasks.multitask.data import PretrainingData

        data = PretrainingData(root=self.root, input_size=MULTITASK_SIZE, num_workers=0)
        data.setup("validate")
        samples = data.sets["val"]  # unaugmented: the same samples in every run, whichever rank loads them
        rank, world = self.trainer.global_rank, self.trainer.world_size
        return DataLoader(samples, batch_size=GLOBAL_BATCH // world, sampler=range(rank, len(samples), world))


def local_elements(module: torch.nn.Module) -> tuple[int, int]:
    """(elements held by this rank, elements of the full parameters)."""
    held = total = 0
    for p in module.parameters():
        local = p.to_local() if hasattr(p, "to_local") else p
        held += local.numel()
        total += p.numel()
    return held, total


def write_init(init: Path) -> Path:
    """The initial weights every run starts from (written once, before any rank starts: by the test, or by rank 0
    before Lightning launches the others)."""
    if not init.exists():
        torch.manual_seed(0)
        model, _ = build_task_model("seg", CLASSES, SIZE, size="tiny")
        model.save_pretrained(init)
    return init


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--devices", type=int, default=1)
    parser.add_argument("--strategy", default="single", choices=["single", "ddp", "fsdp2"])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--stop_after", type=int, default=None, help="stop early (the schedule stays --steps long)")
    parser.add_argument("--resume", default=None)
    parser.add_argument("--checkpointing", type=int, default=0)
    parser.add_argument("--lora", type=int, default=0, help="LoRA rank (0: full fine-tuning)")
    parser.add_argument("--freeze", default="none")
    parser.add_argument("--compile", default=None, help="torch.compile backend of the blocks (default: eager)")
    parser.add_argument("--precision", default="32-true", help="trainer.precision")
    parser.add_argument("--frozen_dtype", default="auto", help="model.frozen_dtype")
    parser.add_argument("--task", default="seg", choices=["seg", "multitask"],
                        help="multitask: the demo pretraining's module (random tiny init) on --data_root")
    parser.add_argument("--data_root", default=None, help="a synthetic dataset with every dense target (multitask)")
    args = parser.parse_args(argv)
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // args.devices))  # ranks share the cores
    L.seed_everything(0, verbose=False)  # the same LoRA adapters in every run (drawn from the run's seed)

    optim = {"lr": 1e-3, "warmup_steps": 0, "fused": False}
    scale = {"activation_checkpointing": args.checkpointing, "compile": bool(args.compile),
             "compile_backend": args.compile or "inductor"}
    if args.task == "multitask":  # rank 0's random init (the seed above) reaches every rank
        module = MultiTaskModule(size="tiny", input_size=MULTITASK_SIZE, optim=optim, scale=scale)
        data = MultiTaskBatches(args.data_root)
    else:
        init = write_init(Path(args.out).parent / "init")  # already there for ranks the tests fork
        # Dice is a batch-level ratio: cross-entropy alone is a per-sample mean, comparable across batch splits.
        module = SegmentationModule(pretrained=str(init), input_size=SIZE, class_names=CLASSES, dice_weight=0.0,
                                    optim=optim, scale=scale, freeze=args.freeze,
                                    lora={"rank": args.lora, "alpha": 2.0 * max(args.lora, 1)},
                                    frozen_dtype=args.frozen_dtype)
        data = FixedBatches()
    strategy = {"single": "auto", "ddp": "ddp", "fsdp2": FSDP2Strategy()}[args.strategy]
    record = Record(args.stop_after)
    trainer = L.Trainer(accelerator="cpu", devices=args.devices, strategy=strategy, max_steps=args.steps,
                        precision=args.precision,
                        limit_val_batches=0, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, callbacks=[record], default_root_dir=args.out,
                        deterministic=True, use_distributed_sampler=False)
    trainer.fit(module, datamodule=data, ckpt_path=args.resume)
    checkpoint = Path(args.out) / "step.ckpt"
    trainer.save_checkpoint(checkpoint)
    held, total = local_elements(module.model)
    per_rank = [None] * trainer.world_size
    if trainer.world_size > 1:
        dist.all_gather_object(per_rank, {"held": held, "total": total})
    else:
        per_rank = [{"held": held, "total": total}]
    if trainer.is_global_zero:
        result = {"losses": record.losses, "global_step": trainer.global_step, "ranks": per_rank,
                  "checkpoint": str(checkpoint), "checkpoint_is_dir": checkpoint.is_dir()}
        (Path(args.out) / "result.json").write_text(json.dumps(result))
    if dist.is_initialized():  # leave together: a rank exiting while gloo threads still run can abort the other
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
