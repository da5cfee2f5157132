"""Semantic segmentation metrics (mIoU, mAcc, aAcc) from a confusion matrix."""

from __future__ import annotations

from typing import Any, Sequence

import torch
from torch import Tensor
from torchmetrics import Metric

from sapiens2_ft.tasks.diagnostics import Diagnostics, Table, confusion_image, plain


class SegmentationMetrics(Metric):
    """Accumulates a (C, C) confusion matrix (rows: ground truth, columns: prediction), sum-reduced.

    ``compute`` returns fractions in [0, 1]: ``mIoU`` (mean IoU over classes present in the ground
    truth or the prediction), ``mAcc`` (mean per-class recall over classes present in the ground
    truth; recall is undefined for the others) and ``aAcc`` (pixel accuracy). ``per_class_iou``
    holds the IoUs (NaN for absent classes) and ``confusion`` the matrix of all processes after ``compute``,
    which ``diagnostics()`` tabulates and draws. Nothing seen gives 0.
    """

    is_differentiable = False
    higher_is_better = True
    full_state_update = False

    confmat: Tensor

    def __init__(self, num_classes: int, ignore_index: int = 255, class_names: Sequence[str] | None = None,
                 **kwargs: Any) -> None:
        """``class_names``: names in the diagnostics (default ``class_<id>``)."""
        super().__init__(**kwargs)
        if num_classes < 1:
            raise ValueError(f"SegmentationMetrics: num_classes must be >= 1, got {num_classes}")
        if class_names is not None and len(class_names) != num_classes:
            raise ValueError(f"SegmentationMetrics: {len(class_names)} class names for {num_classes} classes")
        self.num_classes = int(num_classes)
        self.ignore_index = int(ignore_index)
        self.class_names = list(class_names) if class_names is not None else [f"class_{i}" for i in range(num_classes)]
        self.per_class_iou = torch.full((self.num_classes,), float("nan"))
        self.confusion = torch.zeros(num_classes, num_classes, dtype=torch.int64)
        confmat = torch.zeros(num_classes, num_classes, dtype=torch.int64)
        self.add_state("confmat", default=confmat, dist_reduce_fx="sum")

    def update(self, preds: Tensor, target: Tensor) -> None:
        """preds: (B, H, W) class ids or (B, C, H, W) scores (argmax taken); target (B, H, W) ids or ignore_index."""
        if preds.ndim == target.ndim + 1:
            preds = preds.argmax(dim=1)
        if preds.shape != target.shape:
            raise ValueError(
                f"SegmentationMetrics: preds {tuple(preds.shape)} and target {tuple(target.shape)} do not match"
            )
        valid = target != self.ignore_index
        gt, pr = target[valid].long(), preds[valid].long()
        c = self.num_classes
        if gt.numel() and (gt.min() < 0 or gt.max() >= c or pr.min() < 0 or pr.max() >= c):
            raise ValueError(
                f"SegmentationMetrics: class ids must lie in [0, {c}) (or equal ignore_index={self.ignore_index})"
            )
        counts = torch.bincount(gt * c + pr, minlength=c * c).reshape(c, c)
        self.confmat += counts.to(self.confmat.device)

    def compute(self) -> dict[str, Tensor]:
        """``{"mIoU", "mAcc", "aAcc"}`` as float64 scalars."""
        cm = self.confmat.double()
        tp = cm.diag()
        gt, pr = cm.sum(1), cm.sum(0)
        union = gt + pr - tp
        iou = torch.where(union > 0, tp / union.clamp_min(1), float("nan"))
        acc = torch.where(gt > 0, tp / gt.clamp_min(1), float("nan"))
        self.per_class_iou = iou.cpu()
        self.confusion = self.confmat.detach().cpu().clone()
        total = cm.sum()
        zero = cm.new_zeros(())
        return {
            "mIoU": iou.nanmean() if (union > 0).any() else zero,
            "mAcc": acc.nanmean() if (gt > 0).any() else zero,
            "aAcc": tp.sum() / total if total > 0 else zero,
        }

    def diagnostics(self) -> Diagnostics:
        """Of the latest ``compute``: ``per_class`` (IoU, accuracy = recall, ground-truth and predicted pixels per
        class; None where undefined) and ``confusion`` (pixel counts, rows: ground truth, columns: prediction)
        tables, and the ``confusion`` picture (normalised per ground-truth class)."""
        cm = self.confusion.double()
        tp, gt, pr = cm.diag(), cm.sum(1), cm.sum(0)
        acc = torch.where(gt > 0, tp / gt.clamp_min(1), float("nan"))
        names = self.class_names
        per_class = [[c, names[c], plain(self.per_class_iou[c]), plain(acc[c]), int(gt[c]), int(pr[c])]
                     for c in range(self.num_classes)]
        counts = [[names[c], *(int(v) for v in self.confusion[c])] for c in range(self.num_classes)]
        title = f"confusion of {int(cm.sum())} pixels (per ground-truth class, %)"
        return Diagnostics(
            {"per_class": Table(["class_id", "class", "iou", "accuracy", "gt_pixels", "predicted_pixels"], per_class),
             "confusion": Table(["ground_truth", *names], counts)},
            {"confusion": confusion_image(self.confusion.numpy(), names, title)})
