"""The task registry: the one list of tasks. Everything that depends on the task reads its entry here.

Adding a task is one folder (``tasks/<task>/``: module, loss, metric) plus one ``TaskSpec`` below; a dense
task also gets a target spec in the data layer (``datamodules/dense/targets/<task>.py``). See
``docs/architecture.md``.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

from torch import nn

from datamodules.body_parts import SAPIENS2_PART_CLASSES, resolve_class_names
from datamodules.dense.targets import TARGETS, TargetSpec
from datamodules.keypoints.metainfo import load_metainfo
from sapiens2_ft.models.factory import LoadReport, ModelSource, ModelTarget, build_model, resolve_pretrained
from sapiens2_ft.models.init_from import build_from_run
from sapiens2_ft.models.pretraining_heads import load_task_head
from sapiens2_ft.tasks import heads
from sapiens2_ft.tasks.albedo import draw as albedo_draw
from sapiens2_ft.tasks.matting import draw as matting_draw
from sapiens2_ft.tasks.normal import draw as normal_draw
from sapiens2_ft.tasks.pointmap import draw as pointmap_draw
from sapiens2_ft.tasks.pointmap.scale_head import fit_scale_head
from sapiens2_ft.tasks.pose import draw as pose_draw
from sapiens2_ft.tasks.seg import draw as seg_draw

POSE_DATA = "datamodules.pose_datamodule.PoseDataModule"
DENSE_DATA = "datamodules.dense_datamodule.DenseDataModule"
DEFAULT_TASK = "pose"  # a config without a ``task`` key
KEYPOINT_LINKS = (("data.keypoints", "model.keypoints"), ("data.input_size", "model.input_size"))
DENSE_LINKS = (("task", "data.task"), ("data.input_size", "model.input_size"))
TASK_KEY = "sapiens2_ft_task"  # the task an exported model's config.json records (training/hf_export.py)


@dataclass(frozen=True)
class TaskSpec:
    """One task, as the CLI, the modules, the apps and the data layer see it.

    Args:
        name: The top-level ``task`` key of a config.
        module: Class path of its LightningModule.
        datamodule: Class path of its LightningDataModule.
        monitor: (metric, ``max`` | ``min``): checkpoint selection and the run summary's headline metric.
        model_class: Name of its transformers class (None: not one model, e.g. multi-task pretraining).
        outputs: Names of fixed output channels; empty when the outputs are a label set (keypoints, classes).
        label_kind: What one label is, in messages: ``keypoint``, ``class`` or ``output``.
        label_arg: The module argument that carries the label set (``keypoints``, ``class_names``), if any.
        heads: Released head layout per backbone size (``tasks/heads.py``).
        released_labels: Names of the rows of a released head whose config carries none (read lazily).
        links: ``parser.link_arguments`` of the CLI: ``(source, target)`` or ``(sources, target, compute_fn)``.
        targets: Its dense target spec in the data layer (``datamodules/dense/targets``), if a dense task.
        inference: Class path of its inference object (``tasks/<task>/inference.py``, on
            ``tasks.inference.TaskInference``: what ``predict``, ``evaluate``, the web demo and the Python API run,
            and what it declares it can do); None: not runnable there.
        processor: Settings of its exported ``preprocessor_config.json`` beyond the normalisation.
        draw_sample: How the data-check sheet draws one training sample and its targets (the task's
            ``draw.py``, which also draws its panels and predict pictures); None: no sheet.
        decode: How a runtime without this package turns the model's raw outputs into results (the ONNX export's
            ``onnx_config.json``).
        fit_model: Adapts a built or loaded model to the run's input size, noting changes in the load report, and
            checks it can run there (pointmap: its scale MLP); None: nothing to adapt.
        auto_class: The transformers Auto class an export loads with (its model card's example).
        pipeline_tag: The Hugging Face Hub's task tag of its model card, where the Hub has one for the task.
        predicts: What the model gives, in a phrase for its model card.
    """

    name: str
    module: str
    datamodule: str
    monitor: tuple[str, str]
    model_class: str | None = None
    outputs: tuple[str, ...] = ()
    label_kind: str = "output"
    label_arg: str | None = None
    heads: Mapping[str, dict] = field(default_factory=dict)
    released_labels: Callable[[], Sequence[str]] | None = None
    links: tuple = ()
    targets: TargetSpec | None = None
    inference: str | None = None
    processor: Mapping[str, object] = field(default_factory=dict)
    draw_sample: Callable | None = None
    fit_model: Callable[[nn.Module, LoadReport], None] | None = None
    decode: str = ""
    auto_class: str | None = None
    pipeline_tag: str | None = None
    predicts: str = ""


def _sapiens2_308() -> list[str]:
    return list(load_metainfo("sapiens2_308").keypoint_names)


def _dense(name: str, classes: str, model_class: str, monitor: tuple[str, str], **kwargs) -> TaskSpec:
    """A dense task: the dense data module, its target spec, its ``<Classes>Module`` and ``<Classes>Inference``."""
    return TaskSpec(name, f"sapiens2_ft.tasks.{name}.module.{classes}Module", DENSE_DATA, monitor, model_class,
                    targets=TARGETS[name], inference=f"sapiens2_ft.tasks.{name}.inference.{classes}Inference",
                    **{"links": DENSE_LINKS, **kwargs})


TASKS: dict[str, TaskSpec] = {spec.name: spec for spec in (
    TaskSpec("pose", "sapiens2_ft.tasks.pose.module.PoseModule", POSE_DATA, ("val/AP", "max"),
             "Sapiens2ForPoseEstimation", label_kind="keypoint", label_arg="keypoints", heads=heads.POSE_HEADS,
             released_labels=_sapiens2_308, links=KEYPOINT_LINKS,
             inference="sapiens2_ft.tasks.pose.inference.PoseInference",
             processor={"do_pad": False, "keypoint_heatmap_downscale_factor": 4},
             draw_sample=pose_draw.draw_sample, auto_class="AutoModelForPoseEstimation",
             pipeline_tag="keypoint-detection",
             predicts="the keypoints of each person (top-down: one crop per person box, UDP heatmaps) with a score "
                      "per keypoint",
             decode="heatmaps (B, K, h, w) of person crops (each box widened to the input aspect, affine-warped to "
                    "the input size). With heatmap_output 'logits', take the softmax over each map first. Keypoint k: "
                    "the argmax (x, y) of map k (DARK refinement optional), in crop pixels x * (W - 1) / (w - 1), "
                    "y * (H - 1) / (h - 1) (UDP), then through the inverse crop affine. Score, in [0, 1], at the "
                    "argmax: the map's value clipped to [0, 1] (heatmaps), or the probability mass of the "
                    "(2r + 1) x (2r + 1) pixels around it, r = max(1, round(2 sigma)) with sigma the preprocessor's "
                    "keypoint_heatmap_sigma (logits). Flip test (before all this): average the maps (the "
                    "probabilities) with those of the mirrored crop, mirrored back and rows swapped by flip_pairs."),
    _dense("seg", "Segmentation", "Sapiens2ForSemanticSegmentation", ("val/mIoU", "max"),
           label_kind="class", label_arg="class_names", heads=heads.SEG_HEADS,
           released_labels=lambda: SAPIENS2_PART_CLASSES,
           links=DENSE_LINKS + ((("data.num_classes", "data.class_names"), "model.class_names", resolve_class_names),),
           draw_sample=seg_draw.draw_sample, auto_class="AutoModelForSemanticSegmentation",
           pipeline_tag="image-segmentation", predicts="a body-part class for every pixel",
           decode="logits (B, C, h, w): resize to the input size, argmax over C = class ids (id2label), then undo "
                  "the stretch to the image size.",
           processor={"do_pad": False}),  # transformers' seg post-processing expects a stretched input
    _dense("normal", "Normal", "Sapiens2ForNormalEstimation", ("val/angle_mean", "min"),
           outputs=("normal_x", "normal_y", "normal_z"), heads=heads.PIXEL_SHUFFLE_HEADS,
           draw_sample=normal_draw.draw_sample, auto_class="AutoModelForNormalEstimation",
           predicts="a camera-space surface normal for every pixel",  # the Hub has no normal-estimation task tag
           decode="normals (B, 3, h, w): resize to the input size, divide by the norm per pixel = camera-space unit "
                  "normals (x right, y down, z forward); undo the letterbox.",
           processor={"do_pad": True}),  # letterboxed as in training; the post-processing removes the padding
    _dense("pointmap", "Pointmap", "Sapiens2ForPointmapEstimation", ("val/l2", "min"),
           outputs=("x", "y", "z"), heads=heads.POINTMAP_HEADS, processor={"do_pad": True},
           draw_sample=pointmap_draw.draw_sample, fit_model=fit_scale_head,
           auto_class="AutoModelForPointmapEstimation", pipeline_tag="depth-estimation",
           predicts="camera XYZ in metres for every pixel (a pointmap: depth and 3-D shape)",
           decode="pointmaps (B, 3, h, w): canonical camera XYZ (focal 768); scales (B, 1): metric XYZ = "
                  "pointmaps / scale on all three axes; resize to the input size and undo the letterbox."),
    _dense("matting", "Matting", "Sapiens2ForImageMatting", ("val/sad", "min"),
           outputs=("foreground_r", "foreground_g", "foreground_b", "alpha"), heads=heads.PIXEL_SHUFFLE_HEADS,
           draw_sample=matting_draw.draw_sample, auto_class="AutoModelForImageMatting",
           pipeline_tag="image-segmentation", predicts="an alpha matte and the foreground colours of the people",
           decode="alphas (B, 1, h, w) and foregrounds (B, 3, h, w), in [0, 1]: resize to the input size, undo the "
                  "stretch to the image size.",
           processor={"do_pad": False}),  # transformers' matting post-processing expects a stretched input
    # After normal, whose transformers class it shares: a released normal checkpoint (no recorded task) stays normal.
    _dense("albedo", "Albedo", "Sapiens2ForNormalEstimation", ("val/psnr", "max"),
           outputs=("albedo_r", "albedo_g", "albedo_b"), heads=heads.PIXEL_SHUFFLE_HEADS,
           draw_sample=albedo_draw.draw_sample, auto_class="AutoModelForNormalEstimation",  # the class it shares
           predicts="the RGB albedo (the surface colour before lighting) for every pixel",  # no Hub task tag fits
           decode="normals (B, 3, h, w): RGB albedo (the surface colour before lighting), clamp to [0, 1]; resize "
                  "to the input size and undo the letterbox.",
           processor={"do_pad": True}),  # letterboxed as in training
    # Pretraining of the demo backbone on every task at once (configs/pretrain_demo_backbone.yaml).
    TaskSpec("multitask", "sapiens2_ft.tasks.multitask.module.MultiTaskModule",
             "datamodules.multitask_datamodule.MultiTaskDataModule", ("val/loss", "min"), label_kind="keypoint",
             links=KEYPOINT_LINKS),
)}


def task_spec(task: str) -> TaskSpec:
    """The entry of ``task``; an unknown name is a ValueError listing the tasks."""
    if task not in TASKS:
        raise ValueError(f"unknown task '{task}'; known: {sorted(TASKS)}")
    return TASKS[task]


def import_class(path: str) -> type:
    """The class at a dotted ``module.Class`` path."""
    module, name = path.rsplit(".", 1)
    return getattr(importlib.import_module(module), name)


def inference_class(task: str) -> type | None:
    """The inference class of ``task`` (``tasks.inference.TaskInference``), None for a task not run on its own."""
    spec = task_spec(task)
    return import_class(spec.inference) if spec.inference else None


def takes_person_boxes(task: str) -> bool:
    """Whether ``task``'s model runs on one crop per person box (what its inference class declares)."""
    found = inference_class(task)
    return found is not None and found.takes_person_boxes


def model_class(task: str) -> type:
    """The transformers class of ``task``'s model; a task without one (multitask) is a ValueError."""
    spec = task_spec(task)
    if spec.model_class is None:
        raise ValueError(f"task '{task}' has no single transformers model (known: "
                         f"{sorted(t for t, s in TASKS.items() if s.model_class)})")
    return getattr(importlib.import_module("transformers"), spec.model_class)


def task_of_architecture(architecture: str) -> str | None:
    """The first task whose transformers class is named ``architecture`` (a config's ``architectures[0]``), if any."""
    return next((name for name, spec in TASKS.items() if spec.model_class == architecture), None)


def task_of_config(config) -> str | None:
    """The task of a model's config (``Sapiens2Config``): the one it records (``TASK_KEY``, written by the export;
    possibly a task this registry lacks), else that of its architecture (a released checkpoint records none). Tasks
    may share a transformers class; the recorded name tells them apart."""
    return getattr(config, TASK_KEY, None) or task_of_architecture((config.architectures or ["Sapiens2Model"])[0])


def label_names(task: str, value) -> list[str]:
    """The labels of ``task`` given its label argument's value (a keypoint set; class names, None = the 29
    Sapiens2 classes); the fixed outputs of the others."""
    spec = task_spec(task)
    if spec.label_arg == "keypoints":
        return list(load_metainfo(value).keypoint_names)
    if spec.label_arg is not None:
        return list(value or SAPIENS2_PART_CLASSES)
    return list(spec.outputs)


def build_task_model(task: str, labels: Sequence[str], image_size: Sequence[int], init_from: str | None = None,
                     pretraining_head: bool = False, flip_pairs=None, **source) -> tuple[nn.Module, LoadReport]:
    """``task``'s model for ``labels``: ``models.factory.build_model`` with its transformers class, released head
    layouts and label names, or with ``init_from`` the model of an earlier run (``models.init_from``); then the
    task's ``fit_model``. ``pretraining_head``: the head starts from the task's head saved beside the ``pretrained``
    backbone by multi-task pretraining (``models.pretraining_heads``; not with ``init_from``, whose run has its head).

    ``source``: the fields of ``models.factory.ModelSource`` (``pretrained``, ``size``, ``head``,
    ``pos_embed_rescale``, ``attn_implementation``); ``flip_pairs``: pose's mirror pairs of ``labels``.
    """
    spec = task_spec(task)
    labels = list(labels)
    if spec.outputs and labels != list(spec.outputs):
        raise ValueError(f"task '{task}' predicts {list(spec.outputs)}, got labels {labels}")
    source = ModelSource(**source)
    target = ModelTarget(model_class(task), labels, image_size, spec.heads, flip_pairs,
                         released_labels=spec.released_labels() if spec.released_labels and not init_from else (),
                         rows_by_name=not spec.outputs, holds_head=lambda config: task_of_config(config) == task,
                         task=task, label_kind=spec.label_kind)
    model, report = build_from_run(init_from, target, source) if init_from else build_model(target, source)
    if spec.fit_model is not None:
        spec.fit_model(model, report)
    if pretraining_head and not init_from:
        note, new = load_task_head(model, resolve_pretrained(source.pretrained), task,
                                   labels if spec.label_arg else None)
        report.notes.append(note)
        report.head, report.new = "pretrained", new
    return model, report
