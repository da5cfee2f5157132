"""Body-part segmentation: a Sapiens2 segmentation model trained with class-weighted CE + Dice.

Train: logits at the label resolution, class-weighted cross-entropy (ignore index 255; the upstream
weights for the 29 Sapiens2 classes) plus per-sample Dice over the foreground classes. Val: mIoU / mAcc /
aAcc from a confusion matrix summed across processes; the first validation label maps are written to
``<run_dir>/predictions/``.
"""

from __future__ import annotations

import numpy as np
import torch

from datamodules.classes.class_set import ClassSetError, load_class_set
from sapiens2_ft.tasks.base import TaskModule
from sapiens2_ft.tasks.distill import softened_kl
from sapiens2_ft.tasks.seg import draw
from sapiens2_ft.tasks.seg.inference import SegBatch, SegmentationInference, SegOutputs
from sapiens2_ft.tasks.seg.loss import default_class_weights, segmentation_loss
from sapiens2_ft.tasks.seg.metric import SegmentationMetrics
from sapiens2_ft.tasks.seg.spec import SEG
from sapiens2_ft.tasks.visualize import image_rgb, side_by_side, with_legend


class SegmentationModule(TaskModule):
    """Fine-tune ``Sapiens2ForSemanticSegmentation`` on a class set (the ``model.*`` keys of every task:
    ``TaskModule``).

    Args:
        class_names: Class names in label-id order (linked from ``data.classes``, ``data.class_names``); default:
            the 29 Sapiens2 classes. Head rows of a checkpoint are transferred by class name.
        classes: The class set (linked from ``data.classes``): a class merged from several of the checkpoint's
            starts from their rows (``models.factory.merged_row``), a new class fresh.
        class_weights: Cross-entropy weight per class, in class order. Default: for the 29 Sapiens2 classes
            in their order, the upstream weights (``SAPIENS2_PART_CLASS_WEIGHTS``: background 0.1, small
            parts up to 10), as the released seg models were trained; for any other class set (another
            ``data.num_classes`` or other ``data.class_names``), uniform. Give 29 ones for uniform weights
            on the Sapiens2 set.
        ce_weight: Weight of the cross-entropy term.
        dice_weight: Weight of the Dice term.
        ignore_index: Label value that is ignored by loss and metrics.
    """

    spec = SEG
    inference_class = SegmentationInference

    @classmethod
    def check_options(cls, **options) -> list[str]:
        problems = super().check_options(**options)
        classes, names = options.get("classes"), options.get("class_names")
        try:
            found = load_class_set(classes).names if classes is not None else None
        except ClassSetError as err:
            return problems + [f"data.classes: {err}"]
        if found is not None and names is not None and list(names) != list(found):
            problems.append(f"model.class_names {list(names)} are not the classes of data.classes {classes}: "
                            f"{list(found)}")
        return problems

    def __init__(
        self,
        class_names: list[str] | None = None,
        classes: str | None = None,
        class_weights: list[float] | None = None,
        ce_weight: float = 1.0,
        dice_weight: float = 1.0,
        ignore_index: int = 255,
        **kwargs,
    ):
        super().__init__(**kwargs, _inference_options={"class_names": class_names, "classes": classes})
        self.class_names = names = self.inference.class_names
        if class_weights is not None and len(class_weights) != len(names):
            raise ValueError(f"model.class_weights has {len(class_weights)} values for {len(names)} classes")
        weights = class_weights if class_weights is not None else default_class_weights(names)
        weights = torch.tensor(weights, dtype=torch.float32) if weights is not None else None
        self.register_buffer("class_weights", weights, persistent=False)
        self.val_metrics = SegmentationMetrics(len(self.class_names), ignore_index=ignore_index,
                                               class_names=self.class_names)

    def loss_terms(self, outputs: SegOutputs, batch: SegBatch) -> dict[str, torch.Tensor]:
        hp = self.hparams
        return segmentation_loss(outputs["logits"], batch["labels"], self.class_weights, hp.ignore_index,
                                 hp.ce_weight, hp.dice_weight)

    def distill_loss(self, student: SegOutputs, teacher: SegOutputs, mask=None) -> torch.Tensor:
        """KL from the teacher's class distribution to the student's at ``model.distill.temperature``, x T^2, on
        every pixel."""
        return softened_kl(student["logits"], teacher["logits"], 1, self.distill.temperature)

    def update_metrics(self, outputs: SegOutputs, batch: SegBatch) -> None:
        self.val_metrics.update(outputs["logits"].argmax(1), batch["labels"])

    def panel(self, outputs: SegOutputs, batch: SegBatch, i: int) -> tuple[str, np.ndarray]:
        image, classes, colours = image_rgb(batch, i), len(self.class_names), self.inference.class_set.colours
        labels, predicted_labels = batch["labels"][i].numpy(), outputs["logits"][i].argmax(0).numpy()
        truth = draw.picture(image, labels, classes, self.hparams.ignore_index, colours)
        predicted = draw.picture(image, predicted_labels, classes, colours=colours)
        panel = side_by_side([image, truth, predicted], ["image", "ground truth", "prediction"])
        shown = sorted(set(draw.classes_shown(labels, classes)) | set(draw.classes_shown(predicted_labels, classes)))
        return "segmentation", with_legend(panel, self.class_names, shown, colours)
