"""The pointmap task as the rest of the package sees it (``tasks/spec.py`` groups the fields by reader)."""

from __future__ import annotations

from sapiens2_ft.tasks import heads
from sapiens2_ft.tasks.pointmap import draw
from sapiens2_ft.tasks.pointmap.scale_head import fit_scale_head
from sapiens2_ft.tasks.pointmap.targets import TARGETS
from sapiens2_ft.tasks.spec import DENSE_DATA, DENSE_LINKS, Data, Export, Model, TaskSpec, Training

POINTMAP = TaskSpec(
    "pointmap",
    Training("sapiens2_ft.tasks.pointmap.module.PointmapModule", DENSE_DATA, ("val/l2", "min"), links=DENSE_LINKS),
    Model("Sapiens2ForPointmapEstimation", outputs=("x", "y", "z"), heads=heads.POINTMAP_HEADS,
          fit_model=fit_scale_head),
    Data(TARGETS, draw.draw_sample),
    Export(auto_class="AutoModelForPointmapEstimation", pipeline_tag="depth-estimation",
           predicts="camera XYZ in metres for every pixel (a pointmap: depth and 3-D shape)",
           decode="pointmaps (B, 3, h, w): canonical camera XYZ (focal 768); scales (B, 1): metric XYZ = "
                  "pointmaps / scale on all three axes; resize to the input size.",
           post_process="post_process_pointmap_estimation", unpads=True),
    inference="sapiens2_ft.tasks.pointmap.inference.PointmapInference",
)
