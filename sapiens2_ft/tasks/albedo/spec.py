"""The albedo task as the rest of the package sees it (``tasks/spec.py`` groups the fields by reader)."""

from __future__ import annotations

from sapiens2_ft.tasks import heads
from sapiens2_ft.tasks.albedo import draw
from sapiens2_ft.tasks.albedo.targets import TARGETS
from sapiens2_ft.tasks.spec import DENSE_DATA, DENSE_LINKS, Data, Export, Model, TaskSpec, Training

ALBEDO = TaskSpec(
    "albedo",
    Training("sapiens2_ft.tasks.albedo.module.AlbedoModule", DENSE_DATA, ("val/psnr", "max"), links=DENSE_LINKS),
    # normal's class: a released normal checkpoint (no recorded task) stays normal.
    Model("Sapiens2ForNormalEstimation", outputs=("albedo_r", "albedo_g", "albedo_b"), heads=heads.PIXEL_SHUFFLE_HEADS,
          shares_class=True),
    Data(TARGETS, draw.draw_sample),
    Export(auto_class="AutoModelForNormalEstimation",  # the class it shares
           predicts="the RGB albedo (the surface colour before lighting) for every pixel",  # no Hub task tag fits
           decode="normals (B, 3, h, w): RGB albedo (the surface colour before lighting), clamp to [0, 1]; resize to "
                  "the input size."),  # no post-processing: its class's (normal's) makes the colours unit vectors
    inference="sapiens2_ft.tasks.albedo.inference.AlbedoInference",
)
