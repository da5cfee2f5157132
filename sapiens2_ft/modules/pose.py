"""Top-down pose estimation: a Sapiens2 pose model trained on UDP Gaussian heatmaps.

Train: the batch carries keypoints in crop pixels; heatmap targets are rendered on the device
(308 x 256 x 192 float32 targets would be 60 MB per person through the DataLoader), loss =
visibility-weighted MSE x ``loss_weight`` (or soft-target cross-entropy for from-scratch runs).
Val: flip test, DARK-UDP decode, inverse crop affine to image pixels, OKS AP via pycocotools.
"""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path
from typing import Literal

import lightning as L
import numpy as np
import torch

from sapiens2_ft.checkpoints import RECORD_KEY, model_record, plain_hparams
from sapiens2_ft.codecs import decode_heatmaps, encode_heatmaps, flip_heatmaps, heatmap_to_input_coords
from sapiens2_ft.codecs import input_to_heatmap_coords
from sapiens2_ft.losses import heatmap_cross_entropy, weighted_heatmap_mse
from sapiens2_ft.metainfo import load_metainfo
from sapiens2_ft.metrics import CocoKeypointAP
from sapiens2_ft.models.factory import build_model
from sapiens2_ft.models.init_from import build_from_run
from sapiens2_ft.models.sharding import ScaleConfig, configure_task_model
from sapiens2_ft.optim import OptimConfig, build_optimizer
from sapiens2_ft.preprocessing import normalize_images
from sapiens2_ft.visualize import draw_keypoints, side_by_side

PANEL_SCORE_THRESHOLD = 0.3  # predicted keypoints drawn in the dashboard panels
MAX_PANEL_SAMPLES = 8
LOSSES = {"mse": weighted_heatmap_mse, "heatmap_ce": heatmap_cross_entropy}


class PoseModule(L.LightningModule):
    """Fine-tune ``Sapiens2ForPoseEstimation`` on a keypoint set.

    Args:
        pretrained: Hub id (``facebook/sapiens2-pose-0.4b``, ``facebook/sapiens2-pretrain-1b``) or a local
            ``save_pretrained`` directory. Unset: random init from ``size``.
        init_from: Weights of an earlier fine-tuning run of this task and label set (``.ckpt`` file,
            distributed checkpoint directory or exported directory), loaded whole; the optimiser and
            step start fresh (``--init_from``; to continue a run, use ``--resume``).
        size: Backbone preset when ``pretrained`` is unset: tiny, 0.1b, 0.4b, 0.8b, 1b, 5b.
        head: Head layout override (``Sapiens2HeadConfig`` kwargs); default: the released layout.
        keypoints: Keypoint set, built-in name or YAML path (linked from ``data.keypoints``).
        input_size: Network input (H, W) (linked from ``data.input_size``).
        pos_embed_rescale: RoPE coordinate rescale augmentation of pretraining; None = off.
        attn_implementation: ``sdpa`` or ``eager``.
        sigma: Gaussian sigma of the targets in heatmap pixels (upstream: 6 at 256x192, 2 at 64x48).
        loss: ``mse`` (upstream, for pretrained models) or ``heatmap_ce`` (from-scratch runs).
        loss_weight: Multiplier of the loss (upstream MSE: 10).
        flip_test: Average with the flipped-back heatmaps of the mirrored crop at validation.
        optim: Optimiser and schedule.
        scale: Activation checkpointing and FSDP2 options (``sapiens2_ft.models.sharding.ScaleConfig``).
    """

    task = "pose"
    monitor = ("val/AP", "max")  # checkpoint selection and the run summary's headline metric

    def __init__(
        self,
        pretrained: str | None = None,
        init_from: str | None = None,
        size: str | None = "tiny",
        head: dict | None = None,
        keypoints: str = "coco17",
        input_size: tuple[int, int] = (256, 192),
        pos_embed_rescale: float | None = None,
        attn_implementation: str = "sdpa",
        sigma: float = 2.0,
        loss: Literal["mse", "heatmap_ce"] = "mse",
        loss_weight: float = 10.0,
        flip_test: bool = True,
        optim: OptimConfig = OptimConfig(),
        scale: ScaleConfig = ScaleConfig(),
    ):
        super().__init__()
        self.save_hyperparameters()
        plain_hparams(self)
        # Lightning's CLI stores nested dataclasses in hparams as dicts: keep the objects here.
        self.optim = OptimConfig(**optim) if isinstance(optim, dict) else optim
        self.scale = ScaleConfig(**scale) if isinstance(scale, dict) else scale
        self.metainfo = load_metainfo(keypoints)
        self.labels = list(self.metainfo.keypoint_names)
        common = dict(pos_embed_rescale=pos_embed_rescale, flip_pairs=self.metainfo.flip_pairs,
                      attn_implementation=attn_implementation)
        if init_from:
            self._build = partial(build_from_run, init_from, "pose", self.labels, input_size, **common)
        else:
            self._build = partial(build_model, "pose", self.labels, input_size, pretrained=pretrained, size=size,
                                  head=head, **common)
        self.model: torch.nn.Module | None = None  # built in configure_model, for the trainer's strategy
        self.load_report = None
        self.register_buffer("flip_indices", torch.tensor(self.metainfo.flip_indices), persistent=False)
        self.loss_fn = LOSSES[loss]
        self.val_ap: CocoKeypointAP | None = None
        self._panel_samples: dict | None = None  # crops, targets and predictions of the first validation samples

    def configure_model(self) -> None:
        configure_task_model(self, self._build, "pose", self.scale)

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        return self.model(pixel_values).heatmaps

    def _loss(self, heatmaps: torch.Tensor, batch: dict) -> torch.Tensor:
        hm_size = tuple(heatmaps.shape[-2:])
        coords = input_to_heatmap_coords(batch["keypoints"], self.hparams.input_size, hm_size)
        targets, weights = encode_heatmaps(coords, batch["keypoint_weights"], hm_size, self.hparams.sigma)
        return self.hparams.loss_weight * self.loss_fn(heatmaps, targets, weights)

    def training_step(self, batch: dict, batch_idx: int) -> torch.Tensor:
        loss = self._loss(self(normalize_images(batch["image"])), batch)
        self.log("train/loss", loss, prog_bar=True, batch_size=len(batch["image"]))
        return loss

    # -- validation -------------------------------------------------------------------------

    def on_validation_epoch_start(self) -> None:
        if self.val_ap is None:
            ann_file = self.trainer.datamodule.val_annotation_file
            # Sets with groups (coco_wholebody, sapiens2_308) also log val/AP_<group>.
            self.val_ap = CocoKeypointAP(ann_file, self.metainfo.sigmas, groups=self.metainfo.group_ids).to(self.device)
        self.val_ap.reset()

    def predict_keypoints(self, pixel_values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Heatmaps (flip-tested when enabled) and decoded keypoints in crop pixels with scores."""
        heatmaps = self(pixel_values)
        if self.hparams.flip_test:
            flipped = flip_heatmaps(self(pixel_values.flip(-1)), self.flip_indices)
            heatmaps = (heatmaps + flipped) / 2
        coords, scores = decode_heatmaps(heatmaps.float())
        coords = heatmap_to_input_coords(coords, self.hparams.input_size, tuple(heatmaps.shape[-2:]))
        return heatmaps, coords, scores

    def validation_step(self, batch: dict, batch_idx: int) -> None:
        heatmaps, coords, scores = self.predict_keypoints(normalize_images(batch["image"]))
        self.log("val/loss", self._loss(heatmaps, batch), batch_size=len(coords), sync_dist=True)
        affine = batch["inverse_affine"].to(coords.dtype)  # crop px -> image px, (B, 2, 3)
        image_coords = coords @ affine[:, :, :2].transpose(1, 2) + affine[:, None, :, 2]
        # Repeats that even out the processes' batch counts (loaders.ValShardSampler) are not scored.
        keep = (~batch["padding"] if "padding" in batch
                else torch.ones(len(coords), dtype=torch.bool, device=coords.device))
        if keep.any():
            self.val_ap.update(*(v[keep] for v in (batch["image_id"], image_coords, scores, batch["box_score"],
                                                   batch["area"])))
        if batch_idx == 0:
            n = MAX_PANEL_SAMPLES
            self._panel_samples = {"image": batch["image"][:n].cpu(), "keypoints": batch["keypoints"][:n].cpu(),
                                   "weights": batch["keypoint_weights"][:n].cpu(), "coords": coords[:n].cpu(),
                                   "scores": scores[:n].cpu()}

    def on_validation_epoch_end(self) -> None:
        metrics = self.val_ap.compute()
        self.log_dict({f"val/{k}": v for k, v in metrics.items()}, sync_dist=False)

    def validation_panels(self, count: int) -> dict[str, list[np.ndarray]]:
        """``pose``: ground-truth and predicted skeletons on the first validation crops."""
        if self._panel_samples is None:
            return {}
        p, skeleton = self._panel_samples, self.metainfo.skeleton
        pictures = []
        for i in range(min(count, len(p["image"]))):
            crop = p["image"][i].permute(1, 2, 0).numpy()
            truth = draw_keypoints(crop, p["keypoints"][i].numpy(), p["weights"][i].numpy() > 0, skeleton)
            predicted = draw_keypoints(crop, p["coords"][i].float().numpy(),
                                       p["scores"][i].float().numpy() > PANEL_SCORE_THRESHOLD, skeleton, (255, 128, 0))
            pictures.append(side_by_side([truth, predicted], ["ground truth", "prediction"]))
        return {"pose": pictures}

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        checkpoint.setdefault(RECORD_KEY, {}).update(model_record(self))

    def write_validation_outputs(self, run_dir: Path) -> None:
        """``predictions.json``: COCO keypoint results of the last validation (after rescoring and OKS-NMS)."""
        with open(Path(run_dir) / "predictions.json", "w") as f:
            json.dump(self.val_ap.results if self.val_ap is not None else [], f)

    def configure_optimizers(self):
        total = self.trainer.estimated_stepping_batches
        return build_optimizer(self.model, self.optim, self.model.config.num_hidden_layers, int(total))
