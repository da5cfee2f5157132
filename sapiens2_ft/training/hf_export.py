"""A training checkpoint as a Hugging Face model directory (``<run_dir>/export``, ``python -m sapiens2_ft.export``).

``DIR`` loads with ``transformers``' ``AutoModelFor{PoseEstimation, SemanticSegmentation,
NormalEstimation, PointmapEstimation, ImageMatting}.from_pretrained(DIR)`` and holds:

- ``config.json``: the architecture, head layout, ``image_size``, keypoint or class names in
  ``id2label``, (pose) ``flip_pairs``, and the task as ``sapiens2_ft_task`` (``tasks.registry.task_of_config``:
  tasks may share a transformers class);
- ``model.safetensors``: the weights (float32);
- ``preprocessor_config.json``: input size and the mean / std of the normalisation
  (``Sapiens2ImageProcessor`` settings, plus the task's own from the task registry);
- ``keypoints.yaml`` (pose): the keypoint set (names, OKS sigmas, skeleton), usable as ``data.keypoints``;
- ``README.md``: the model card (``training/model_card.py``), with ``LICENSE-sapiens2.md`` and the run's
  ``predictions.png`` beside it.
- ``export_manifest.json``: the files the export wrote (``export_dir.py``: a folder holding other files is refused
  without ``overwrite``, and only these files are uploaded).

A checkpoint is a ``.ckpt`` file or an FSDP2 distributed checkpoint directory (consolidated here, in one
process, reading only the model's tensors).
"""

from __future__ import annotations

from pathlib import Path

import yaml

from datamodules.boundary.writes import staged, write_json, write_text
from datamodules.classes.class_set import CLASS_SET_FILE
from datamodules.keypoints.metainfo import SET_FILE
from sapiens2_ft.models.checkpoints import load_model
from sapiens2_ft.models.preprocessing import IMAGE_MEAN, IMAGE_STD
from sapiens2_ft.tasks.registry import TASK_KEY, model_class, task_spec
from sapiens2_ft.tasks.saved_model import PREPROCESSOR_FILE
from sapiens2_ft.training.export_dir import check_folder, recording, remove_earlier_export
from sapiens2_ft.training.hub import push_export
from sapiens2_ft.training.model_card import write_card


def preprocessor_config(task: str, image_size, heatmap_sigma: float | None = None) -> dict:
    """``Sapiens2ImageProcessor`` settings matching the training pipeline's normalisation."""
    height, width = (int(v) for v in image_size)
    config = {
        "image_processor_type": "Sapiens2ImageProcessor",
        "do_resize": True,
        "size": {"height": height, "width": width},
        "do_rescale": True,
        "rescale_factor": 1 / 255,
        "do_normalize": True,
        "image_mean": [round(m / 255, 6) for m in IMAGE_MEAN],
        "image_std": [round(s / 255, 6) for s in IMAGE_STD],
        "do_reduce_labels": False,
        **task_spec(task).processor_settings(),  # do_pad: letterboxed as the task is trained and predicted
    }
    if "keypoint_heatmap_downscale_factor" in config and heatmap_sigma is not None:
        config["keypoint_heatmap_sigma"] = heatmap_sigma
    return config


def export_checkpoint(checkpoint: str | Path, out: str | Path, push_to_hub: str | None = None,
                      private: bool = False, overwrite: bool = False) -> Path:
    """Write the Hugging Face directory of ``checkpoint`` to ``out``, with its model card; optionally upload it to
    the Hub repository ``push_to_hub`` (``private``: a new repository is private; ``hub.HubError`` when refused).
    A folder holding files no export wrote is refused unless ``overwrite`` (``export_dir.py``)."""
    out = Path(out)
    check_folder(out, overwrite)
    model, info = load_model(checkpoint, model_class)
    model.config.architectures = [type(model).__name__]
    setattr(model.config, TASK_KEY, info.task)  # tasks may share a class: predict and evaluate read the task here
    remove_earlier_export(out)
    with recording(out):
        with staged(out) as stage:  # transformers writes by path: into a new folder, then renamed over the names
            model.save_pretrained(stage, safe_serialization=True)
        sigma = info.hyper_parameters.get("sigma")
        write_json(out, PREPROCESSOR_FILE, preprocessor_config(info.task, model.config.image_size, sigma), indent=2)
        if info.keypoints is not None:
            write_text(out, SET_FILE, yaml.safe_dump(info.keypoints, sort_keys=False))
        if info.classes is not None:
            write_text(out, CLASS_SET_FILE, yaml.safe_dump(info.classes, sort_keys=False))
        write_card(out, info)
    if push_to_hub:
        push_export(out, push_to_hub, private)
    return out
