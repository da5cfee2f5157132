"""Segmentation loss: class-weighted cross-entropy + soft Dice over foreground classes."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def dice_loss(logits: torch.Tensor, labels: torch.Tensor, ignore_index: int = 255, smooth: float = 1.0) -> torch.Tensor:
    """Mean over classes 1..C-1 of ``1 - (2|P G| + s) / (|P| + |G| + s)``.

    P are softmax probabilities, G the one-hot labels; sums run over the whole batch and skip
    ``ignore_index`` pixels. Zero when C == 1 (no foreground class).
    """
    num_classes = logits.shape[1]
    if num_classes < 2:
        return logits.sum() * 0.0
    valid = labels != ignore_index
    target = torch.where(valid, labels, 0)
    probs = F.softmax(logits.float(), dim=1)
    # |P G| and |G| per class without a (B, C, H, W) one-hot: gather each pixel's true-class probability.
    true_prob = probs.gather(1, target.unsqueeze(1)).squeeze(1) * valid
    inter = torch.zeros(num_classes, device=logits.device).scatter_add(0, target.flatten(), true_prob.flatten())
    label_count = torch.bincount(target[valid], minlength=num_classes).float()
    prob_sum = (probs * valid.unsqueeze(1)).sum((0, 2, 3))
    dice = 1.0 - (2.0 * inter + smooth) / (prob_sum + label_count + smooth)
    return dice[1:].mean()


def segmentation_loss(
    logits: torch.Tensor,
    labels: torch.Tensor,
    class_weights: torch.Tensor | None = None,
    ignore_index: int = 255,
    ce_weight: float = 1.0,
    dice_weight: float = 1.0,
) -> dict[str, torch.Tensor]:
    """Cross-entropy + Dice. logits (B, C, H, W), labels (B, H, W) int64.

    Returns ``{"ce", "dice", "loss"}`` with ``loss = ce_weight * ce + dice_weight * dice``.
    ``ce`` is PyTorch's weighted mean (sum of w_y * nll over valid pixels / sum of w_y); it is 0
    when every pixel is ignored.
    """
    if logits.ndim != 4 or labels.ndim != 3 or (logits.shape[0], *logits.shape[2:]) != tuple(labels.shape):
        raise ValueError(
            f"segmentation_loss: expected logits (B, C, H, W) and labels (B, H, W), "
            f"got {tuple(logits.shape)} and {tuple(labels.shape)}"
        )
    labels = labels.long()
    num_classes = logits.shape[1]
    valid = labels != ignore_index
    if bool(((labels[valid] < 0) | (labels[valid] >= num_classes)).any()):
        raise ValueError(
            f"segmentation_loss: labels must lie in [0, {num_classes}) or equal ignore_index={ignore_index}"
        )
    if class_weights is not None:
        class_weights = torch.as_tensor(class_weights, dtype=torch.float32, device=logits.device)
        if class_weights.shape != (num_classes,):
            raise ValueError(
                f"segmentation_loss: class_weights must have shape ({num_classes},), "
                f"got {tuple(class_weights.shape)}"
            )
    if valid.any():
        ce = F.cross_entropy(logits.float(), labels, weight=class_weights, ignore_index=ignore_index)
    else:
        ce = logits.sum() * 0.0
    dice = dice_loss(logits, labels, ignore_index)
    return {"ce": ce, "dice": dice, "loss": ce_weight * ce + dice_weight * dice}
