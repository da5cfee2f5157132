"""Segmentation loss of the Sapiens2 recipe: class-weighted cross-entropy + per-sample soft Dice.

Both terms reduce as upstream does (``dense/src/models/losses/seg_loss.py`` with ``reduction="none"``,
then a plain mean in ``engine/models/base_model.py``): the cross-entropy is averaged over every pixel,
the Dice loss over every sample of the batch.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from datamodules.body_parts import SAPIENS2_PART_CLASSES

# Cross-entropy weight per class of SAPIENS2_PART_CLASSES (same order), as the released seg models were
# trained (CLASS_WEIGHT of the upstream configs ``dense/configs/seg/shutterstock_goliath/*.py``).
SAPIENS2_PART_CLASS_WEIGHTS = (
    0.1, 10, 10, 3, 2,          # Background, Apparel, Eyeglass, Face_Neck, Hair
    4, 4, 2, 2, 6, 10, 3, 3,    # Left_{Foot, Hand, Lower_Arm, Lower_Leg, Shoe, Sock, Upper_Arm, Upper_Leg}
    1,                          # Lower_Clothing
    4, 4, 2, 2, 6, 10, 3, 3,    # Right_{same eight}
    1, 1,                       # Torso, Upper_Clothing
    10, 10, 10, 10, 10,         # Lower_Lip, Upper_Lip, Lower_Teeth, Upper_Teeth, Tongue
)


def default_class_weights(class_names: list[str] | tuple[str, ...]) -> list[float] | None:
    """The upstream weights for exactly the 29 Sapiens2 classes in their order, else None (uniform)."""
    if tuple(class_names) == SAPIENS2_PART_CLASSES:
        return [float(w) for w in SAPIENS2_PART_CLASS_WEIGHTS]
    return None


def weighted_cross_entropy(
    logits: torch.Tensor, labels: torch.Tensor, class_weights: torch.Tensor | None = None, ignore_index: int = 255
) -> torch.Tensor:
    """``sum over valid pixels of w_y * -log p_y``, divided by the number of ALL pixels ``B * H * W``.

    Ignored pixels add 0 to the sum but count in the denominator (not PyTorch's weighted mean, which
    divides by the sum of the weights of the valid pixels).
    """
    return _cross_entropy(F.log_softmax(logits.float(), dim=1), labels, class_weights, ignore_index)


def dice_loss(logits: torch.Tensor, labels: torch.Tensor, ignore_index: int = 255, eps: float = 1e-3) -> torch.Tensor:
    """Per-sample soft Dice loss over the foreground classes 1..C-1 (upstream ``DiceLoss``, not naive).

    For sample b and class c, with P the softmax probabilities and G the one-hot labels on the valid
    pixels: ``d_bc = (2 sum P G + eps) / (sum P^2 + sum G^2 + eps)``. A sample's Dice is the mean of
    ``d_bc`` over the classes present in its labels; its loss is ``1 - Dice``, or 0 when no foreground
    class is present. The result is the mean over all B samples. Zero when C == 1.
    """
    return _dice(F.softmax(logits.float(), dim=1), labels, ignore_index, eps)


def _cross_entropy(
    log_probs: torch.Tensor, labels: torch.Tensor, class_weights: torch.Tensor | None, ignore_index: int
) -> torch.Tensor:
    """``weighted_cross_entropy`` from log-probabilities (B, C, H, W)."""
    valid = labels != ignore_index
    target = torch.where(valid, labels, 0)
    nll = -log_probs.gather(1, target.unsqueeze(1)).squeeze(1)
    if class_weights is not None:
        nll = nll * class_weights[target]
    return torch.where(valid, nll, 0.0).mean()


def _dice(probs: torch.Tensor, labels: torch.Tensor, ignore_index: int, eps: float) -> torch.Tensor:
    """``dice_loss`` from probabilities (B, C, H, W)."""
    b, num_classes = probs.shape[:2]
    if num_classes < 2:
        return probs.sum() * 0.0
    valid = labels != ignore_index
    target = torch.where(valid, labels, 0)
    # Sums of P G and G per (sample, class) without a (B, C, H, W) one-hot: P G is each pixel's true-class
    # probability, scattered into its (sample, class) slot (accumulated in float64: a scatter adds one by
    # one, and float32 would lose ~1e-4 of a sum over 10^4 pixels); G^2 = G is a label count.
    slot = (torch.arange(b, device=labels.device).view(b, 1, 1) * num_classes + target).flatten()
    true_prob = torch.where(valid, probs.gather(1, target.unsqueeze(1)).squeeze(1), 0.0).flatten()
    inter = torch.zeros(b * num_classes, dtype=torch.float64, device=probs.device)
    inter = inter.scatter_add(0, slot, true_prob.double()).float()
    count = torch.bincount(slot[valid.flatten()], minlength=b * num_classes).float()
    prob_sq = (probs.square() * valid.unsqueeze(1).to(probs.dtype)).sum((2, 3))
    inter, count, prob_sq = inter.view(b, num_classes)[:, 1:], count.view(b, num_classes)[:, 1:], prob_sq[:, 1:]
    dice = (2.0 * inter + eps) / (prob_sq + count + eps)
    present = (count > 0).float()
    num_present = present.sum(1)
    sample_dice = (dice * present).sum(1) / num_present.clamp_min(1.0)
    return ((1.0 - sample_dice) * (num_present > 0)).mean()


def segmentation_loss(
    logits: torch.Tensor,
    labels: torch.Tensor,
    class_weights: torch.Tensor | None = None,
    ignore_index: int = 255,
    ce_weight: float = 1.0,
    dice_weight: float = 1.0,
) -> dict[str, torch.Tensor]:
    """Cross-entropy + Dice. logits (B, C, H, W), labels (B, H, W) int64, class_weights (C,) or None.

    Returns ``{"ce", "dice", "loss"}`` with ``loss = ce_weight * ce + dice_weight * dice``; ``ce`` is
    ``weighted_cross_entropy`` (0 when every pixel is ignored), ``dice`` is ``dice_loss``.
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
    log_probs = F.log_softmax(logits.float(), dim=1)  # one softmax for both terms
    ce = _cross_entropy(log_probs, labels, class_weights, ignore_index)
    dice = _dice(log_probs.exp(), labels, ignore_index, 1e-3)
    return {"ce": ce, "dice": dice, "loss": ce_weight * ce + dice_weight * dice}
