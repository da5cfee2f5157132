"""The tasks the demo backbone is pretrained on, by name: their specs (``tasks/<task>/spec.py``). A fixed list: a
task added later joins the pretraining only when added here, with its targets in the synthetic data."""

from __future__ import annotations

from sapiens2_ft.tasks.matting.spec import MATTING
from sapiens2_ft.tasks.normal.spec import NORMAL
from sapiens2_ft.tasks.pointmap.spec import POINTMAP
from sapiens2_ft.tasks.pose.spec import POSE
from sapiens2_ft.tasks.seg.spec import SEG

PRETRAINING_TASKS = {spec.name: spec for spec in (POSE, SEG, NORMAL, POINTMAP, MATTING)}
# Those of whole images with per-pixel targets (the others' are person crops).
PRETRAINING_DENSE_TASKS = tuple(name for name, spec in PRETRAINING_TASKS.items() if spec.data.targets is not None)
