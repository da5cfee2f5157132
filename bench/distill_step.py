"""What a teacher costs a training step, on the CPU at the demo's scale (docs/distill.md).

    nice -n 10 python bench/distill_step.py [--batch 16] [--student_blocks 3] [--steps 4] [--rounds 2]

Teacher: the pose demo's model (the shipped mini backbone, 6 blocks, with its pretrained COCO-17 cross-entropy head,
as a saved model); student: the same architecture cut to ``--student_blocks`` blocks. One step = forward, backward
and AdamW step of the student at 256x192 on ``--batch`` crops: (a) the labelled loss alone, (b) plus the teacher's
term on the same crops, (c) plus as many unlabelled crops through both. The three alternate, ``--rounds`` times;
the median ms a step of each and the ratios to (a) are printed (the threads: torch's default, 2 here).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sapiens2_ft.tasks.pose.module import PoseModule  # noqa: E402

INPUT = (256, 192)
DEMO = str(ROOT / "assets" / "sapiens2-mini-synthetic")


def saved_teacher(folder: Path) -> Path:
    """The demo's starting model (mini backbone + its pretrained pose head, heatmap CE) saved as a model folder."""
    teacher = PoseModule(keypoints="coco17", pretrained=DEMO, pretraining_head=True, loss="heatmap_ce",
                         input_size=INPUT)
    teacher.configure_model()
    teacher.model.save_pretrained(folder)
    return folder


def student(teacher: Path | None, blocks: int) -> PoseModule:
    """The mini architecture cut to ``blocks`` blocks (its first ones), with the teacher when given."""
    module = PoseModule(keypoints="coco17", pretrained=DEMO, pretraining_head=True, loss="heatmap_ce",
                        input_size=INPUT, distill={"teacher": str(teacher)} if teacher else {})
    module.configure_model()
    encoder = module.model.model.model
    encoder.layer = encoder.layer[:blocks]
    module.model.config.num_hidden_layers = blocks
    module.attach_teacher()
    return module


def batch(size: int, seed: int) -> dict:
    g = torch.Generator().manual_seed(seed)
    return {"image": torch.randint(0, 256, (size, 3, *INPUT), dtype=torch.uint8, generator=g),
            "keypoints": torch.rand(size, 17, 2, generator=g) * torch.tensor([INPUT[1], INPUT[0]]),
            "keypoint_weights": torch.ones(size, 17)}


def step(module: PoseModule, optimizer, data: dict, unlabeled: torch.Tensor | None) -> float:
    start = time.perf_counter()
    if module.teacher is None:
        from sapiens2_ft.models.preprocessing import normalize_images

        outputs = module.predict(normalize_images(data["image"]), size=INPUT)
        loss = module.loss_terms(outputs, data)["loss"]
    else:
        outputs, distilled = module.distillation(data["image"], unlabeled, data)
        loss = module.loss_terms(outputs, data)["loss"] + distilled
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--student_blocks", type=int, default=3)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        teacher = saved_teacher(Path(tmp) / "teacher")
        runs = {"a: labelled loss alone": (student(None, args.student_blocks), False),
                "b: + teacher on the labelled crops": (student(teacher, args.student_blocks), False),
                "c: + as many unlabelled crops": (student(teacher, args.student_blocks), True)}
        optimizers = {name: torch.optim.AdamW(m.model.parameters(), lr=1e-4) for name, (m, _) in runs.items()}
        times: dict[str, list[float]] = {name: [] for name in runs}
        data, unlabeled = batch(args.batch, 0), batch(args.batch, 1)["image"]
        for name, (module, with_unlabeled) in runs.items():  # warm-up
            step(module, optimizers[name], data, unlabeled if with_unlabeled else None)
        for _ in range(args.rounds):
            for name, (module, with_unlabeled) in runs.items():
                times[name] += [step(module, optimizers[name], data, unlabeled if with_unlabeled else None)
                                for _ in range(args.steps)]
    base = statistics.median(times["a: labelled loss alone"])
    print(f"student: {args.student_blocks} of the mini backbone's 6 blocks; teacher: all 6; batch {args.batch} at "
          f"{INPUT[0]}x{INPUT[1]}, {torch.get_num_threads()} threads, float32")
    print("| step | ms (median) | x (a) |\n|---|---|---|")
    for name, values in times.items():
        ms = 1000 * statistics.median(values)
        print(f"| {name} | {ms:.0f} | {ms / (1000 * base):.2f} |")


if __name__ == "__main__":
    main()
