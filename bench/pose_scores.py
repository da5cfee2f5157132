"""Keypoint score rules of a heatmap cross-entropy pose model, compared on one checkpoint's validation set.

A ``heatmap_ce`` head outputs logits. Each rule decodes the same (flip-tested) network outputs and scores them
with the project's OKS AP (``CocoKeypointAP``: rescoring at 0.2, OKS-NMS, pycocotools), so AP / AR differ only
by the rule. Rules:

- ``logit max``: decode the averaged logits, score = their maximum (what ``PoseModule.infer`` did before);
- ``prob max``: softmax each map, average the flips, decode, score = the peak probability;
- ``prob mass rR``: the same decode, score = the probability mass in the (2R+1)^2 window around the decoded
  keypoint (``window_mass``), for R in 1, 2, 3, 4, 6 (4 = 2 sigma at the demos' sigma 2);
- ``logit, mass r2``: keypoints decoded from the logits, scored by the mass (which decode costs the AP).

Also reported per rule: the mean score and, as a calibration check, the mean score of keypoints whose
prediction lands within the COCO OKS 0.5 radius of a labelled truth vs of those that do not.

Run: ``python bench/pose_scores.py runs/pose_demo/<stamp>`` (a pose run directory with ``checkpoints/last.ckpt``).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
import yaml

from datamodules.pose_datamodule import PoseDataModule
from sapiens2_ft.models.preprocessing import normalize_images
from sapiens2_ft.tasks.pose.codec import (decode_heatmaps, flip_heatmaps, heatmap_probabilities,
                                          heatmap_to_input_coords, window_mass)
from sapiens2_ft.tasks.pose.module import PoseModule


def load(run_dir: Path) -> tuple[PoseModule, PoseDataModule]:
    checkpoint = torch.load(run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    module = PoseModule(**{k: v for k, v in checkpoint["hyper_parameters"].items() if not k.startswith("_")})
    module.configure_model()
    module.load_state_dict(checkpoint["state_dict"])
    data = yaml.safe_load((run_dir / "config.yaml").read_text())["data"]
    data["num_workers"] = 0
    datamodule = PoseDataModule(**data)
    datamodule.setup("validate")
    return module.eval(), datamodule


def mass(radius: int):
    return lambda logits, probs, coords: window_mass(probs, coords, radius)


# name: (maps the keypoints are decoded from, score of each keypoint)
RULES = {
    "logit max": ("logits", lambda logits, probs, coords: logits.flatten(-2).amax(-1)),
    "logit, mass r2": ("logits", mass(2)),
    "prob max": ("probs", lambda logits, probs, coords: probs.flatten(-2).amax(-1)),
    **{f"prob mass r{r}": ("probs", mass(r)) for r in (1, 2, 3, 4, 6)},
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", type=Path)
    args = parser.parse_args()
    torch.manual_seed(0)
    module, datamodule = load(args.run_dir)
    flip = module.flip_indices
    metrics = {name: module.ap_metric(datamodule.val_annotation_file) for name in RULES}
    calibration = {name: [[], []] for name in RULES}
    sigmas = torch.tensor(module.metainfo.sigmas)
    with torch.no_grad():
        for batch in datamodule.val_dataloader():
            x = normalize_images(batch["image"])
            logits = module.predict(x)["heatmaps"].float()
            logits_flip = flip_heatmaps(module.predict(x.flip(-1))["heatmaps"].float(), flip)
            mean_logits = (logits + logits_flip) / 2
            probs = (heatmap_probabilities(logits) + heatmap_probabilities(logits_flip)) / 2
            hm_size = tuple(logits.shape[-2:])
            decoded = {"logits": decode_heatmaps(mean_logits)[0], "probs": decode_heatmaps(probs)[0]}
            for name, (source, rule) in RULES.items():
                coords_hm = decoded[source]
                scores = rule(mean_logits, probs, coords_hm)
                coords = heatmap_to_input_coords(coords_hm, module.hparams.input_size, hm_size)
                affine = batch["inverse_affine"].to(coords.dtype)
                image_coords = coords @ affine[:, :, :2].transpose(1, 2) + affine[:, None, :, 2]
                metrics[name].update(batch["image_id"], image_coords, scores, batch["box_score"], batch["area"])
                # OKS 0.5 radius of each keypoint: d^2 = -2 ln(0.5) s^2 (2 sigma)^2, s^2 = area (crop pixels).
                crop_scale = torch.linalg.det(batch["inverse_affine"][:, :, :2].double()).abs().sqrt()
                area = batch["area"].double() / crop_scale**2
                radius2 = 2 * torch.log(torch.tensor(2.0)) * area[:, None] * (2 * sigmas[None].double()) ** 2
                dist2 = ((coords.double() - batch["keypoints"].double()) ** 2).sum(-1)
                labelled = batch["keypoint_weights"] > 0
                hit = (dist2 <= radius2) & labelled
                calibration[name][0].append(scores[hit])
                calibration[name][1].append(scores[labelled & ~hit])
    print(f"{'rule':<15} {'AP':>6} {'AP50':>6} {'AR':>6} {'AR50':>6}  {'mean':>8} {'hits':>8} {'misses':>8}")
    for name, metric in metrics.items():
        result = metric.compute()
        hits, misses = (torch.cat(c) for c in calibration[name])
        every = torch.cat([hits, misses])
        print(f"{name:<15} {result['AP']:6.3f} {result['AP50']:6.3f} {result['AR']:6.3f} {result['AR50']:6.3f}  "
              f"{every.mean():8.3f} {hits.mean():8.3f} {misses.mean():8.3f}   (hit rate {len(hits) / len(every):.2f})")


if __name__ == "__main__":
    main()
