"""Body-part segmentation with a trained model: class logits at the image's pixels, class ids and their colours,
where the people and their heads are, the class areas found."""

from __future__ import annotations

from typing import Sequence, TypedDict

import numpy as np
import torch

from datamodules.body_parts import HEAD_PARTS, SAPIENS2_PART_CLASSES
from sapiens2_ft.tasks.dense_maps import resize_to
from sapiens2_ft.tasks.inference import Batch, Files, TaskInference
from sapiens2_ft.tasks.sample_pictures import SheetLabels
from sapiens2_ft.tasks.seg import draw
from sapiens2_ft.tasks.seg.spec import SEG
from sapiens2_ft.tasks.visualize import with_legend


class SegBatch(Batch):
    labels: torch.Tensor  # (B, H, W) int64 class ids, 255 = ignored


class SegOutputs(TypedDict):
    logits: torch.Tensor  # (B, C, H, W)


class SegmentationInference(TaskInference):
    """A segmentation model on a class set (``class_names`` in label-id order; None: the 29 Sapiens2 classes)."""

    spec = SEG
    finds_people = True
    pseudo_labels = "label_maps"  # the class of each pixel it is sure of

    def __init__(self, input_size: Sequence[int] = (256, 192), class_names: Sequence[str] | None = None, model=None):
        super().__init__(input_size, model)
        self.class_names = self.labels = list(class_names or SAPIENS2_PART_CLASSES)

    def predict(self, pixel_values: torch.Tensor, size: Sequence[int] | None = None) -> SegOutputs:
        return {"logits": resize_to(self.model(pixel_values).logits, size)}

    def files(self, outputs: SegOutputs, i: int, image: np.ndarray, mask: torch.Tensor | None = None) -> Files:
        """``NAME.png``: predicted class ids; ``NAME_overlay.png``: their colours over the image."""
        labels = outputs["logits"][i].argmax(0).to(torch.uint8).cpu().numpy()
        overlay = draw.picture(image, labels, len(self.class_names))
        return {".png": labels, "_overlay.png": np.ascontiguousarray(overlay[..., ::-1])}

    def picture(self, result: Files, image: np.ndarray, people: np.ndarray | None) -> tuple[str, np.ndarray]:
        return draw.TITLE, draw.picture(image, result[".png"], len(self.class_names))

    def sheet_legend(self, row: np.ndarray, result: Files) -> np.ndarray:
        return with_legend(row, self.class_names, draw.classes_shown(result[".png"], len(self.class_names)))

    def sheet_labels(self) -> SheetLabels:
        return SheetLabels(class_names=tuple(self.class_names))

    def findings(self, result: Files) -> dict:
        """The fraction of the image each class covers, largest first (classes absent left out)."""
        counts = np.bincount(result[".png"].reshape(-1), minlength=len(self.class_names))[:len(self.class_names)]
        order = np.argsort(-counts, kind="stable")
        return {"class_areas": {self.class_names[i]: round(float(counts[i]) / result[".png"].size, 5)
                                for i in order if counts[i]}}

    def people(self, outputs: SegOutputs) -> tuple[torch.Tensor, torch.Tensor]:
        """Any class but background (0); probability 1 - p(background)."""
        probs = outputs["logits"][0].float().softmax(0)
        return (probs.argmax(0) > 0).cpu(), (1 - probs[0]).cpu()

    def people_heads(self, outputs: SegOutputs) -> torch.Tensor | None:
        """The pixels of the head's classes (``HEAD_PARTS``); None when the class set has none of them."""
        ids = [i for i, name in enumerate(self.class_names) if name in HEAD_PARTS]
        if not ids:
            return None
        return torch.isin(outputs["logits"][0].argmax(0), torch.tensor(ids, device=outputs["logits"].device)).cpu()
