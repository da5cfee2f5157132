"""Time per training step: the Lightning module under ``lightning.Trainer`` vs a bare PyTorch loop, on CPU.

Both sides train the same ``SegmentationModule(size=...)`` model (its ``.model``, built once by
``configure_model()``), on the same fixed batch (a prebuilt uint8 image batch + labels served by a
``DataLoader(batch_size=None)`` from memory), with the same optimiser and schedule
(``build_optimizer(model, module.optim, ...)``, which is what ``configure_optimizers`` returns) and the
same loss (``segmentation_loss``: cross-entropy + Dice on logits resized to the labels).

- Lightning: ``Trainer(accelerator="cpu", max_steps=N, logger=False, enable_checkpointing=False,
  enable_progress_bar=False, enable_model_summary=False)``; a step is the time between consecutive
  ``on_train_batch_end`` calls (data fetch, hooks, logging, forward, backward, AdamW, lr schedule);
- bare loop: ``for batch in loader: forward, loss, zero_grad, backward, step, scheduler.step()``, a step
  being the time between consecutive step ends likewise.

Noise (other processes on the machine) is reduced by pairing steps close in time:

- ``--mode steps`` (default): one Lightning fit of N steps; after each Lightning step a callback runs one
  bare-loop step (own DataLoader iterator, own AdamW + schedule, same model). A Lightning step is then
  the time from the end of that callback to the next ``on_train_batch_end``, so the bare step inside the
  callback is not counted; a bare step is timed from the callback's start to its scheduler step;
- ``--mode runs``: whole runs alternate (Lightning, bare, bare, Lightning, ...) ``--rounds`` times, each
  with a fresh AdamW.

The first ``--warmup`` steps of every run are excluded. Reported: the median step time of each side, the
ratio of the medians, and the median of the per-pair (per-round) ratios Lightning/bare. The target is
judged on the latter: each pair ran within about a second, so slow changes in machine load cancel.

  Target: Lightning's overhead per step is at most 5%.

The overhead is a roughly fixed time per step (loop bookkeeping, hooks, ``self.log_dict`` of the loss
terms), so its percentage grows as steps get shorter (try ``--input 64 48 --batch 1``).

Run: ``python bench/step_overhead.py [--mode steps|runs] [--size tiny] [--input 256 192] [--batch 4] [--steps 40]``
(about 50 s on 2 busy cores with the defaults).
"""

from __future__ import annotations

import argparse
import statistics
import time

TARGET_OVERHEAD = 0.05


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="tiny", help="backbone preset")
    parser.add_argument("--input", type=int, nargs=2, default=[256, 192], metavar=("H", "W"))
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--mode", choices=["steps", "runs"], default="steps",
                        help="interleave single steps (default) or alternate whole runs")
    parser.add_argument("--steps", type=int, default=None,
                        help="steps per run (Lightning's max_steps); default 40 (steps) / 12 (runs)")
    parser.add_argument("--warmup", type=int, default=3, help="leading steps of every run not timed")
    parser.add_argument("--rounds", type=int, default=3, help="--mode runs: alternations of the two runs")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    args = parser.parse_args()
    if args.steps is None:
        args.steps = 40 if args.mode == "steps" else 12
    if args.steps <= args.warmup + 2 or args.warmup < 1:
        parser.error("need --warmup >= 1 and --steps > --warmup + 2")

    import lightning as L
    import torch
    from torch.utils.data import DataLoader, Dataset

    from sapiens2_ft.models.optim import build_optimizer
    from sapiens2_ft.models.preprocessing import normalize_images
    from sapiens2_ft.tasks.dense_maps import resize_to
    from sapiens2_ft.tasks.seg.loss import segmentation_loss
    from sapiens2_ft.tasks.seg.module import SegmentationModule

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    size = tuple(args.input)
    module = SegmentationModule(size=args.size, input_size=size)
    module.configure_model()  # builds module.model once; the trainer's own call then keeps it
    model = module.model
    hp = module.hparams
    num_classes = len(module.class_names)

    g = torch.Generator().manual_seed(0)
    batch = {"image": torch.randint(0, 256, (args.batch, 3, *size), generator=g, dtype=torch.uint8),
             "labels": torch.randint(0, num_classes, (args.batch, *size), generator=g)}

    class SameBatch(Dataset):
        def __len__(self) -> int:
            return args.steps

        def __getitem__(self, i: int) -> dict:
            return batch

    def loader() -> DataLoader:
        return DataLoader(SameBatch(), batch_size=None, shuffle=False, num_workers=0)

    class BareLoop:
        """The bare PyTorch training loop, one step per ``step()`` call."""

        def __init__(self):
            opt = build_optimizer(model, module.optim, model.config.num_hidden_layers, args.steps)
            self.optimizer, self.scheduler = opt["optimizer"], opt["lr_scheduler"]["scheduler"]
            self.batches = iter(loader())

        def step(self) -> None:
            b = next(self.batches)
            images = b["image"]
            logits = resize_to(model(normalize_images(images)).logits, images.shape[-2:])
            loss = segmentation_loss(logits, b["labels"], module.class_weights, hp.ignore_index,
                                     hp.ce_weight, hp.dice_weight)["loss"]
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            self.optimizer.step()
            self.scheduler.step()

    class StepClock(L.Callback):
        """Lightning step ends; with ``interleave``, one bare step after each (its time kept apart)."""

        def __init__(self, interleave: bool):
            self.interleave = interleave
            self.light: list[float] = []  # from the previous callback's exit to this step's end
            self.bare: list[float] = []
            self.previous_exit: float | None = None

        def on_train_start(self, trainer, pl_module):
            self.loop = BareLoop() if self.interleave else None

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            now = time.perf_counter()
            if self.previous_exit is not None:
                self.light.append(now - self.previous_exit)
            if self.loop is not None:
                self.loop.step()
                self.bare.append(time.perf_counter() - now)
            self.previous_exit = time.perf_counter()

    def fit(interleave: bool) -> StepClock:
        clock = StepClock(interleave)
        trainer = L.Trainer(accelerator="cpu", devices=1, max_steps=args.steps, logger=False,
                            enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                            limit_val_batches=0, num_sanity_val_steps=0, callbacks=[clock])
        trainer.fit(module, train_dataloaders=loader())
        if trainer.global_step != args.steps:
            raise RuntimeError(f"Lightning ran {trainer.global_step} steps, expected {args.steps}")
        return clock

    def run_bare() -> list[float]:
        model.train()
        loop = BareLoop()
        ends = []
        for _ in range(args.steps):
            loop.step()
            ends.append(time.perf_counter())
        return [b - a for a, b in zip(ends, ends[1:])][args.warmup:]

    import logging

    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)  # no per-fit banner lines
    print(f"SegmentationModule(size={args.size!r}) {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M params, "
          f"input {size[0]}x{size[1]}, batch {args.batch}, {args.threads} thread(s), mode {args.mode}: "
          + (f"{args.steps} Lightning steps, each followed by one bare step" if args.mode == "steps" else
             f"{args.rounds} rounds x {args.steps} steps per side")
          + f"; first {args.warmup} steps of each run excluded")
    if args.mode == "steps":
        clock = fit(interleave=True)
        # clock.light[i] is Lightning step i + 2 (step 1 has no start mark), clock.bare[i] is bare step i + 1
        light, bare = clock.light[args.warmup - 1:], clock.bare[args.warmup:]
        pairs = [lt / bt for lt, bt in zip(light, bare)]
        n = len(pairs)
        print(f"  {n} pairs; paired ratios Lightning/bare: quartiles "
              + ", ".join(f"{q:.3f}" for q in statistics.quantiles(pairs, n=4)))
        paired = statistics.median(pairs)
    else:
        light, bare, per_round = [], [], []
        for r in range(args.rounds):
            order = ("lightning", "bare") if r % 2 == 0 else ("bare", "lightning")
            got = {}
            for side in order:
                got[side] = fit(interleave=False).light[args.warmup:] if side == "lightning" else run_bare()
            light += got["lightning"]
            bare += got["bare"]
            ratio = statistics.median(got["lightning"]) / statistics.median(got["bare"])
            per_round.append(ratio)
            print(f"  round {r + 1} ({order[0]} first): lightning {1e3 * statistics.median(got['lightning']):7.1f} ms"
                  f"  bare {1e3 * statistics.median(got['bare']):7.1f} ms  overhead {100 * (ratio - 1):+.1f}%")
        paired = statistics.median(per_round)

    med_l, med_b = statistics.median(light), statistics.median(bare)
    unit = "pair" if args.mode == "steps" else "round"
    print(f"median step, Lightning: {1e3 * med_l:7.1f} ms  (n={len(light)}, min {1e3 * min(light):.1f}, "
          f"max {1e3 * max(light):.1f})")
    print(f"median step, bare loop: {1e3 * med_b:7.1f} ms  (n={len(bare)}, min {1e3 * min(bare):.1f}, "
          f"max {1e3 * max(bare):.1f})")
    print(f"overhead, ratio of medians:       {100 * (med_l / med_b - 1):+.1f}% (ratio {med_l / med_b:.3f}, "
          f"{1e3 * (med_l - med_b):+.1f} ms/step)")
    print(f"overhead, median per-{unit} ratio: {100 * (paired - 1):+.1f}% (ratio {paired:.3f})")
    overhead = paired - 1
    print(f"target overhead <= {100 * TARGET_OVERHEAD:.0f}% (median per-{unit} ratio): {100 * overhead:+.1f}% "
          f"{'PASS' if overhead <= TARGET_OVERHEAD else 'FAIL'}")


if __name__ == "__main__":
    main()
