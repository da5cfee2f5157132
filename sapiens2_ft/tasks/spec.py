"""What a task is to the rest of the package: one ``TaskSpec`` per task, its fields grouped by who reads them.

Each task defines its spec in its own folder (``tasks/<task>/spec.py``); the registry (``tasks/registry.py``) lists
them. This module imports no task folder, so the task folders and the shared modules below the registry can use it.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

from torch import nn

from datamodules.dense.pipelines import LETTERBOX, STRETCH
from datamodules.dense.target_spec import TargetSpec
from sapiens2_ft.models.factory import LoadReport

TASK_KEY = "sapiens2_ft_task"  # the task an exported model's config.json records (training/hf_export.py)
DENSE_DATA = "sapiens2_ft.tasks.dense_data.DenseTaskData"  # the data module of the whole-image tasks
KEYPOINT_LINKS = (("data.keypoints", "model.keypoints"), ("data.input_size", "model.input_size"))
DENSE_LINKS = (("task", "data.task"), ("data.input_size", "model.input_size"))


@dataclass(frozen=True)
class Training:
    """What ``train.py`` builds for the task (``training/cli.py``) and how it picks a run's checkpoints.

    Args:
        module: Class path of its LightningModule.
        datamodule: Class path of its LightningDataModule.
        monitor: (metric, ``max`` | ``min``): checkpoint selection and the run summary's headline metric.
        links: ``parser.link_arguments`` of the CLI: ``(source, target)`` or ``(sources, target, compute_fn)``.
    """

    module: str
    datamodule: str
    monitor: tuple[str, str]
    links: tuple = ()


@dataclass(frozen=True)
class Model:
    """Its transformers model as ``tasks/task_model.py`` builds it, and what its outputs are.

    Args:
        model_class: Name of its transformers class (None: not one model, e.g. multi-task pretraining).
        outputs: Names of fixed output channels; empty when the outputs are a label set (keypoints, classes).
        label_kind: What one label is, in messages: ``keypoint``, ``class`` or ``output``.
        label_arg: The module argument that carries the label set (``keypoints``, ``class_names``), if any.
        heads: Released head layout per backbone size (``tasks/heads.py``).
        released_labels: Names of the rows of a released head whose config carries none (read lazily).
        fit_model: Adapts a built or loaded model to the run's input size, noting changes in the load report, and
            checks it can run there (pointmap: its scale MLP); None: nothing to adapt.
        shares_class: Its transformers class is another task's: a checkpoint is this task's only when its config
            records it (``TASK_KEY``); a released checkpoint, which records none, is the other task's.
    """

    model_class: str | None = None
    outputs: tuple[str, ...] = ()
    label_kind: str = "output"
    label_arg: str | None = None
    heads: Mapping[str, dict] = field(default_factory=dict)
    released_labels: Callable[[], Sequence[str]] | None = None
    fit_model: Callable[[nn.Module, LoadReport], None] | None = None
    shares_class: bool = False

    def transformers_class(self) -> type:
        """The transformers class named ``model_class``."""
        return getattr(importlib.import_module("transformers"), self.model_class)


@dataclass(frozen=True)
class Data:
    """Its data as the data layer and the data check see it.

    Args:
        targets: Its target spec, what the data layer is handed (``datamodules.dense.target_spec.TargetSpec``: files,
            loading, the item, how its maps move, augmentation, filters, and so the resize it is trained, validated
            and predicted with; the task's ``targets.py``); None: not a whole-image task (pose's person crops,
            multi-task pretraining).
        draw_sample: How the data-check sheet draws one training sample and its targets (the task's ``draw.py``,
            which also draws its panels and predict pictures); None: no sheet.
    """

    targets: TargetSpec | None = None
    draw_sample: Callable | None = None


@dataclass(frozen=True)
class Export:
    """What the export writes of it beside the weights (``training/hf_export.py``, ``onnx_export.py``,
    ``model_card.py``).

    Args:
        auto_class: The transformers Auto class an export loads with (its model card's example).
        pipeline_tag: The Hugging Face Hub's task tag of its model card, where the Hub has one for the task.
        predicts: What the model gives, in a phrase for its model card.
        decode: How a runtime without this package turns the model's raw outputs into results (``onnx_config.json``;
            undoing the resize follows, from ``TaskSpec.resize``).
        processor: Settings of its ``preprocessor_config.json`` beyond the normalisation and the resize (``do_pad``,
            from ``TaskSpec.resize``).
        post_process: The ``Sapiens2ImageProcessor`` method that turns its outputs into results at an image's size,
            where one fits the task; None: none does (its transformers class's belongs to another task).
        unpads: Whether ``post_process`` removes the letterbox's padding (given the images' sizes, in input pixels:
            on maps at the input size only); False: it only resizes, which undoes a stretch and no letterbox.
    """

    auto_class: str | None = None
    pipeline_tag: str | None = None
    predicts: str = ""
    decode: str = ""
    processor: Mapping[str, object] = field(default_factory=dict)
    post_process: str | None = None
    unpads: bool = False


@dataclass(frozen=True)
class TaskSpec:
    """One task as the CLI, the model builder, the data layer, the export and the apps see it.

    Args:
        name: The top-level ``task`` key of a config.
        training: What ``train.py`` builds (``Training``).
        model: Its transformers model and outputs (``Model``).
        data: Its target spec and data-check drawing (``Data``).
        export: Its export's processor settings, ONNX decoding and model card (``Export``).
        inference: Class path of its inference object (``tasks/<task>/inference.py``, on
            ``tasks.inference.TaskInference``: what ``predict``, ``evaluate``, the web demo and the Python API run,
            and what it declares it can do); None: not runnable there.
    """

    name: str
    training: Training
    model: Model = field(default_factory=Model)
    data: Data = field(default_factory=Data)
    export: Export = field(default_factory=Export)
    inference: str | None = None

    @property
    def resize(self) -> str | None:
        """How a whole image is resized to the network input in training, validation, predict and the export:
        ``letterbox`` or ``stretch`` (its target spec's); None for a task of person crops or of no model."""
        return self.data.targets.resize if self.data.targets is not None else None

    def processor_settings(self) -> dict:
        """Its ``Sapiens2ImageProcessor`` settings beyond the normalisation: ``do_pad`` (letterbox) from ``resize``,
        then the task's own."""
        return {"do_pad": self.resize == LETTERBOX, **self.export.processor}

    def transformers_post_processes(self, output_scale: float) -> bool:
        """Whether transformers' own ``post_process`` undoes its resize for a model whose maps come out at
        ``output_scale`` of the input size (``models.head_size.output_scale``): a stretch at any size; a letterbox only
        when the method removes padding and the maps are at the input size (it crops in input pixels)."""
        if self.export.post_process is None or self.resize is None:
            return False
        return self.resize == STRETCH or (self.export.unpads and output_scale == 1.0)

    def holds(self, config) -> bool:
        """Whether a saved model's ``config`` (``Sapiens2Config``) is of this task: the task it records, else (a
        released checkpoint records none) its architecture, unless this task ``shares_class``."""
        recorded = getattr(config, TASK_KEY, None)
        if recorded:
            return recorded == self.name
        architecture = (config.architectures or ["Sapiens2Model"])[0]
        return not self.model.shares_class and self.model.model_class == architecture

