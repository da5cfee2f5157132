"""The seg task as the rest of the package sees it (``tasks/spec.py`` groups the fields by reader)."""

from __future__ import annotations

from datamodules.body_parts import SAPIENS2_PART_CLASSES
from datamodules.classes.class_set import set_class_names
from sapiens2_ft.tasks import heads
from sapiens2_ft.tasks.seg import draw
from sapiens2_ft.tasks.seg.targets import TARGETS
from sapiens2_ft.tasks.spec import DENSE_DATA, DENSE_LINKS, Data, Export, Model, TaskSpec, Training

SEG = TaskSpec(
    "seg",
    Training("sapiens2_ft.tasks.seg.module.SegmentationModule", DENSE_DATA, ("val/mIoU", "max"),
             links=DENSE_LINKS + ((("data.num_classes", "data.class_names", "data.classes"), "model.class_names",
                                   set_class_names), ("data.classes", "model.classes"))),
    Model("Sapiens2ForSemanticSegmentation", label_kind="class", label_arg="class_names", heads=heads.SEG_HEADS,
          released_labels=lambda: SAPIENS2_PART_CLASSES),
    Data(TARGETS, draw.draw_sample),
    Export(auto_class="AutoModelForSemanticSegmentation", pipeline_tag="image-segmentation",
           predicts="a body-part class for every pixel",
           decode="logits (B, C, h, w): resize to the input size, argmax over C = class ids (id2label).",
           post_process="post_process_semantic_segmentation"),  # resizes: undoes the stretch
    inference="sapiens2_ft.tasks.seg.inference.SegmentationInference",
)
