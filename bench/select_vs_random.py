"""Does ``sapiens2-ft select`` pick images worth labelling? Fine-tune on N images chosen by ``select`` against N chosen
at random, on the synthetic demo data (docs/benchmarks.md "Choosing what to label").

For each seed: K random training images are "labelled"; the pose demo recipe (``pose_demo.yaml``: the demo backbone,
its pretrained COCO-17 head, four new foot keypoints) fine-tuned on them alone is the model that chooses. It ranks the
rest of the training images (their ground-truth boxes stand in for a detector) and picks N (``select``'s ranking,
with ``--diversity``); N others are drawn at random. The recipe is then fine-tuned from its start on K + N images for
each pick, and the val split's OKS AP compared. The labels of the picked images are the data set's own (an oracle
labeller), so the comparison is of the choice alone.

    nice -n 19 python bench/select_vs_random.py --seeds 0 1 2 --out bench/out/select

Short runs (30 steps to choose, 80 to fine-tune, batch 16), so that three seeds fit in what two shared cores give a
job at nice 19: about 4 min of an idle machine a seed, an hour and more when the cores are busy with others' work.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def subset(annotations: dict, keep: set[int], path: Path) -> Path:
    """The COCO json of the images whose ids are in ``keep``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({**annotations, "images": [i for i in annotations["images"] if i["id"] in keep],
                                "annotations": [a for a in annotations["annotations"] if a["image_id"] in keep]}))
    return path


def train(root: Path, ann: Path, run_dir: Path, steps: int, seed: int, validate: bool) -> dict:
    import sapiens2_ft

    overrides = dict(data__root=str(root), data__train_ann=str(ann.resolve()), trainer__max_steps=steps,
                     trainer__val_check_interval=steps, run_dir=str(run_dir), seed_everything=seed,
                     trainer__enable_progress_bar=False, tracking__logger="csv", data__num_workers=0,
                     validate_first=False)  # one validation, at the end: the start is the same for both picks
    if not validate:
        overrides.update(trainer__limit_val_batches=0)
    return sapiens2_ft.train(config="pose_demo.yaml", **overrides)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--labelled", type=int, default=24, help="K: images labelled at the start")
    p.add_argument("--budget", type=int, default=48, help="N: images picked to label next")
    p.add_argument("--seed_steps", type=int, default=30, help="steps of the model that chooses")
    p.add_argument("--steps", type=int, default=80, help="steps of each fine-tune on K + N")
    p.add_argument("--diversity", type=float, default=0.0)
    p.add_argument("--out", type=Path, default=REPO / "bench" / "out" / "select")
    args = p.parse_args()

    import torch

    from datamodules.synthetic_data import SyntheticData, render_if_missing
    from sapiens2_ft.labelling.select import unsure_images
    from sapiens2_ft.labelling.selection import choose
    from sapiens2_ft.predict.boxes import FileBoxes
    from sapiens2_ft.predict.loading import load_inference

    torch.set_num_threads(2)
    root = args.out / "synthetic"
    render_if_missing(root, SyntheticData())
    annotations = json.loads((root / "annotations" / "train.json").read_text())
    ids = sorted(i["id"] for i in annotations["images"])
    names = {i["id"]: i["file_name"] for i in annotations["images"]}
    done = args.out / "results.json"
    results = json.loads(done.read_text()) if done.is_file() else []  # a rerun goes on where one stopped
    for seed in args.seeds:
        if any(r["seed"] == seed for r in results):
            continue
        started = time.time()
        labelled = set(random.Random(seed).sample(ids, args.labelled))
        work = args.out / f"seed{seed}"
        shutil.rmtree(work, ignore_errors=True)  # a seed cut short starts again
        chooser = train(root, subset(annotations, labelled, work / "labelled.json"), work / "chooser",
                        args.seed_steps, seed, validate=False)
        pool = [i for i in ids if i not in labelled]
        images = {names[i]: root / "train" / "images" / names[i] for i in pool}
        boxes = {names[a["image_id"]]: [] for a in annotations["annotations"]}
        for a in annotations["annotations"]:
            boxes[names[a["image_id"]]].append([*a["bbox"], 1.0])
        inference, _ = load_inference(chooser["export"], work / "chooser_model")
        found = unsure_images(inference, images, FileBoxes(boxes), batch_size=16, workers=0)
        keys = sorted(found)
        picked = [keys[k] for k in choose([found[k][0] for k in keys], [found[k][1] for k in keys], args.budget,
                                          args.diversity)]
        by_name = {v: k for k, v in names.items()}
        arms = {"select": {by_name[k] for k in picked},
                "random": set(random.Random(1000 + seed).sample(pool, args.budget))}
        row = {"seed": seed, "unsure_mean_picked": statistics.mean(found[k][0] for k in picked),
               "unsure_mean_pool": statistics.mean(v[0] for v in found.values()),
               "people_picked": sum(len(boxes.get(names[i], [])) for i in arms["select"]),
               "people_random": sum(len(boxes.get(names[i], [])) for i in arms["random"])}
        for arm, chosen in arms.items():
            summary = train(root, subset(annotations, labelled | chosen, work / f"{arm}.json"), work / arm,
                            args.steps, seed, validate=True)
            row[arm] = {k: summary["metrics"].get(k) for k in ("AP", "AP50", "AP_body", "AP_feet")}
        row["minutes"] = (time.time() - started) / 60
        results.append(row)
        print(json.dumps(row), flush=True)
        (args.out / "results.json").write_text(json.dumps(results, indent=1))
    for key in ("AP", "AP_body", "AP_feet"):
        picked = [r["select"][key] for r in results if r["select"][key] is not None]
        rand = [r["random"][key] for r in results if r["random"][key] is not None]
        if picked and rand:
            diff = [a - b for a, b in zip(picked, rand)]
            print(f"{key}: select {statistics.mean(picked):.3f}, random {statistics.mean(rand):.3f}, "
                  f"difference {statistics.mean(diff):+.3f} (per seed {', '.join(f'{d:+.3f}' for d in diff)})")


if __name__ == "__main__":
    main()
