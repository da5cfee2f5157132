"""The dense training pipelines by name (``data.augment.pipeline``, ``TargetSpec.pipeline``) and the resize each ends
with, which is also the validation and predict resize of a task trained with it (``dense.augment`` runs them)."""

from __future__ import annotations

# Upstream's segmentation recipe (stretched to the input), its camera recipe (normals, pointmaps, albedo: letterboxed)
# and the generic set (letterboxed). The first is named after the upstream recipe, not after a task of this package.
SEG_PIPELINE, CAMERA_PIPELINE, GENERIC_PIPELINE = PIPELINE_NAMES = ("seg", "camera", "generic")
# The two resizes of a whole image to the input: aspect kept, centred, zero padding; or aspect not kept.
LETTERBOX, STRETCH = FITS = ("letterbox", "stretch")
PIPELINE_FIT = {SEG_PIPELINE: STRETCH, CAMERA_PIPELINE: LETTERBOX, GENERIC_PIPELINE: LETTERBOX}
