"""The matting task as the rest of the package sees it (``tasks/spec.py`` groups the fields by reader)."""

from __future__ import annotations

from sapiens2_ft.tasks import heads
from sapiens2_ft.tasks.matting import draw
from sapiens2_ft.tasks.matting.targets import TARGETS
from sapiens2_ft.tasks.spec import DENSE_DATA, DENSE_LINKS, Data, Export, Model, TaskSpec, Training

MATTING = TaskSpec(
    "matting",
    Training("sapiens2_ft.tasks.matting.module.MattingModule", DENSE_DATA, ("val/sad", "min"), links=DENSE_LINKS),
    Model("Sapiens2ForImageMatting", outputs=("foreground_r", "foreground_g", "foreground_b", "alpha"),
          heads=heads.PIXEL_SHUFFLE_HEADS),
    Data(TARGETS, draw.draw_sample),
    Export(auto_class="AutoModelForImageMatting", pipeline_tag="image-segmentation",
           predicts="an alpha matte and the foreground colours of the people",
           decode="alphas (B, 1, h, w) and foregrounds (B, 3, h, w), in [0, 1]: resize to the input size.",
           post_process="post_process_image_matting"),  # resizes only: it keeps the letterbox's padding
    inference="sapiens2_ft.tasks.matting.inference.MattingInference",
)
