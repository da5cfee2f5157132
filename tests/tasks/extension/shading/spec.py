"""The shading task as the rest of the package sees it (``tasks/spec.py`` groups the fields by reader)."""

from __future__ import annotations

from sapiens2_ft.tasks import heads
from sapiens2_ft.tasks.shading import draw
from sapiens2_ft.tasks.shading.targets import TARGETS
from sapiens2_ft.tasks.spec import DENSE_DATA, DENSE_LINKS, Data, Export, Model, TaskSpec, Training

SHADING = TaskSpec(
    "shading",
    Training("sapiens2_ft.tasks.shading.module.ShadingModule", DENSE_DATA, ("val/mae", "min"), links=DENSE_LINKS),
    # transformers has no shading class: normal's, with one channel; a released normal checkpoint stays normal.
    Model("Sapiens2ForNormalEstimation", outputs=("shading",), heads=heads.PIXEL_SHUFFLE_HEADS, shares_class=True),
    Data(TARGETS, draw.draw_sample),
    Export(auto_class="AutoModelForNormalEstimation", predicts="a grey shading in [0, 1] for every pixel",
           decode="normals (B, 1, h, w): the sigmoid = shading in [0, 1]; resize to the input size."),
    inference="sapiens2_ft.tasks.shading.inference.ShadingInference",
)
