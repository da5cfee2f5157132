"""The pose module hands its own arguments to its inference object (not through its hyper-parameters)."""

from __future__ import annotations

import pytest

from sapiens2_ft.tasks.pose.inference import LOGITS_OUTPUT
from sapiens2_ft.tasks.pose.module import PoseModule


@pytest.mark.parametrize("loss,output", [("mse", "heatmaps"), ("heatmap_ce", LOGITS_OUTPUT)])
def test_the_arguments_reach_the_inference_object(loss, output):
    module = PoseModule(keypoints="sapiens2_308", sigma=3.0, loss=loss, flip_test=False, size="tiny",
                        input_size=(64, 48))
    inference = module.inference
    assert inference.metainfo.name == "sapiens2_308" and len(module.labels) == 308
    assert (inference.sigma, inference.flip_test, inference.heatmap_output) == (3.0, False, output)
    assert module.metainfo is inference.metainfo and inference.input_size == (64, 48)
    assert module.hparams.keypoints == "sapiens2_308" and "_inference_options" not in module.hparams
