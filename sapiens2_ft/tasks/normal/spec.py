"""The normal task as the rest of the package sees it (``tasks/spec.py`` groups the fields by reader)."""

from __future__ import annotations

from sapiens2_ft.tasks import heads
from sapiens2_ft.tasks.normal import draw
from sapiens2_ft.tasks.normal.targets import TARGETS
from sapiens2_ft.tasks.spec import DENSE_DATA, DENSE_LINKS, Data, Export, Model, TaskSpec, Training

NORMAL = TaskSpec(
    "normal",
    Training("sapiens2_ft.tasks.normal.module.NormalModule", DENSE_DATA, ("val/angle_mean", "min"), links=DENSE_LINKS),
    Model("Sapiens2ForNormalEstimation", outputs=("normal_x", "normal_y", "normal_z"), heads=heads.PIXEL_SHUFFLE_HEADS),
    Data(TARGETS, draw.draw_sample),
    Export(auto_class="AutoModelForNormalEstimation",  # the Hub has no normal-estimation task tag
           predicts="a camera-space surface normal for every pixel",
           decode="normals (B, 3, h, w): resize to the input size, divide by the norm per pixel = camera-space unit "
                  "normals (x right, y down, z forward).",
           post_process="post_process_normal_estimation", unpads=True),
    inference="sapiens2_ft.tasks.normal.inference.NormalInference",
)
