"""Body-part segmentation with a trained model: class logits at the image's pixels, class ids and their colours,
where the people and their heads are, the class areas found."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence, TypedDict

import numpy as np
import torch

from datamodules.body_parts import HEAD_PARTS, SAPIENS2_PART_CLASSES
from datamodules.classes.class_set import CLASS_SET_FILE, ClassSetError, load_class_set, plain_set
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
    """A segmentation model on a class set (``class_names`` in label-id order; None: the 29 Sapiens2 classes).
    ``classes``: the class set those names come from (``datamodules.classes``; a built-in name or YAML path): its
    merges start from their sources' rows when the model is built, its colours draw the classes."""

    spec = SEG
    finds_people = True
    pseudo_labels = "label_maps"  # the class of each pixel it is sure of

    def __init__(self, input_size: Sequence[int] = (256, 192), class_names: Sequence[str] | None = None,
                 classes: str | None = None, model=None):
        super().__init__(input_size, model)
        self.classes = classes
        self.class_set = load_class_set(classes) if classes is not None else plain_set(class_names or
                                                                                        SAPIENS2_PART_CLASSES)
        if class_names is not None and list(class_names) != list(self.class_set.names):
            raise ValueError(f"class names {list(class_names)} are not those of the class set {classes}: "
                             f"{list(self.class_set.names)}")
        self.class_names = self.labels = list(self.class_set.names)

    def checkpoint_record(self) -> dict:
        """The class set, where one was given (its export carries it as ``classes.yaml``: names, merges, colours)."""
        return {"classes": self.class_set.to_dict()} if self.classes is not None else {}

    @classmethod
    def options_from_model(cls, directory: Path, config, labels=None) -> dict:
        """The base's (the model's class names, or ``labels`` among them), with the class set of an export's
        ``classes.yaml`` when its names are the model's rows (its colours draw the classes)."""
        options = super().options_from_model(directory, config, labels)
        exported = Path(directory) / CLASS_SET_FILE
        if labels is None and exported.is_file():
            try:
                found = load_class_set(str(exported))
            except ClassSetError as err:
                raise ValueError(str(err)) from None
            if list(found.names) == options["class_names"]:
                options["classes"] = str(exported)
        return options

    def model_options(self) -> dict:
        """The classes the set merges from the checkpoint's (by name), for the rows they start from."""
        return {"label_sources": self.class_set.merges}

    def predict(self, pixel_values: torch.Tensor, size: Sequence[int] | None = None) -> SegOutputs:
        return {"logits": resize_to(self.model(pixel_values).logits, size)}

    def files(self, outputs: SegOutputs, i: int, image: np.ndarray, mask: torch.Tensor | None = None) -> Files:
        """``NAME.png``: predicted class ids; ``NAME_overlay.png``: their colours over the image."""
        labels = outputs["logits"][i].argmax(0).to(torch.uint8).cpu().numpy()
        overlay = draw.picture(image, labels, len(self.class_names), colours=self.class_set.colours)
        return {".png": labels, "_overlay.png": np.ascontiguousarray(overlay[..., ::-1])}

    def picture(self, result: Files, image: np.ndarray, people: np.ndarray | None) -> tuple[str, np.ndarray]:
        return draw.TITLE, draw.picture(image, result[".png"], len(self.class_names), colours=self.class_set.colours)

    def sheet_legend(self, row: np.ndarray, result: Files) -> np.ndarray:
        return with_legend(row, self.class_names, draw.classes_shown(result[".png"], len(self.class_names)),
                           self.class_set.colours)

    def sheet_labels(self) -> SheetLabels:
        return SheetLabels(class_names=tuple(self.class_names))

    def findings(self, result: Files) -> dict:
        """The fraction of the image each class covers, largest first (classes absent left out)."""
        counts = np.bincount(result[".png"].reshape(-1), minlength=len(self.class_names))[:len(self.class_names)]
        order = np.argsort(-counts, kind="stable")
        return {"class_areas": {self.class_names[i]: round(float(counts[i]) / result[".png"].size, 5)
                                for i in order if counts[i]}}

    def class_probabilities(self, outputs: SegOutputs) -> torch.Tensor:
        """(C, H, W) float32 on the CPU: each pixel's probability of each class, of one image's outputs
        (``image_outputs``): the pre-annotations' scores and ``select``'s margins (``sapiens2_ft/labelling``)."""
        return outputs["logits"][0].float().softmax(0).cpu()

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
