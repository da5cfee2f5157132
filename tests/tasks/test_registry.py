"""The task registry is the one list of tasks, and every task module keeps the base's contract."""

from __future__ import annotations

import inspect

import pytest
import torch
import transformers

from sapiens2_ft.tasks.base import RunModule, TaskInterface, TaskModule
from sapiens2_ft.tasks.inference import TaskInference
from sapiens2_ft.tasks.spec import DENSE_DATA
from sapiens2_ft.tasks.registry import (
    TASK_KEY,
    TASKS,
    import_class,
    inference_class,
    label_names,
    model_class,
    task_of_architecture,
    task_of_config,
    task_spec,
)
from sapiens2_ft.training.cli import Sapiens2CLI

COMMON_KEYS = ["pretrained", "init_from", "size", "head", "input_size", "pos_embed_rescale", "attn_implementation",
               "optim", "scale"]


@pytest.mark.parametrize("task", sorted(TASKS))
def test_each_entry_names_importable_classes_of_its_task(task):
    spec = task_spec(task)
    module = import_class(spec.training.module)
    assert module.spec is spec
    assert issubclass(import_class(spec.training.datamodule), __import__("lightning").LightningDataModule)
    assert spec.training.monitor[1] in ("max", "min") and spec.training.monitor[0].startswith("val/")
    if spec.model.model_class is None:
        assert spec.inference is None
        with pytest.raises(ValueError, match="no single transformers model"):
            model_class(task)
        return
    assert model_class(task) is getattr(transformers, spec.model.model_class)
    # its model card's loading example and Hub task: the Auto class gives its class; a tag the Hub knows, or none
    export, model = spec.export, spec.model
    assert getattr(transformers, export.auto_class)._model_mapping[transformers.Sapiens2Config] is model_class(task)
    assert export.pipeline_tag in (None, "keypoint-detection", "image-segmentation", "depth-estimation")
    assert export.predicts
    # Tasks may share a class: an export records its task, which wins over the class's own task.
    recorded = transformers.Sapiens2Config(architectures=[model.model_class], **{TASK_KEY: task})
    assert task_of_config(recorded) == task and spec.holds(recorded)
    released = transformers.Sapiens2Config(architectures=[model.model_class])  # a released checkpoint records none
    assert task_spec(task_of_architecture(model.model_class)).model.model_class == model.model_class
    assert (task_of_config(released) == task) == spec.holds(released) == (not model.shares_class)
    assert issubclass(module, TaskModule) and module.inference_class is inference_class(task)
    assert issubclass(inference_class(task), TaskInference) and inference_class(task).spec is spec
    assert inference_class(task).picture is not TaskInference.picture and spec.data.draw_sample is not None  # drawn
    assert "0.4b" in spec.model.heads and "tiny" in spec.model.heads  # the fallback layout and the CPU-sized one
    assert bool(model.outputs) != bool(model.label_arg)  # fixed channels, or a label set given by one argument
    if spec.model.label_arg:
        assert spec.model.label_arg in inspect.signature(module.__init__).parameters
        assert spec.model.released_labels is not None and len(spec.model.released_labels()) > 0


def test_whole_image_tasks_hand_their_targets_to_the_data_layer():
    """Each task with a target spec trains on the dense data module, which gets that spec by the task's name from the
    registry (the data layer holds no list of tasks); the others have their own data module."""
    from sapiens2_ft.tasks.dense_data import dense_targets

    for name, spec in TASKS.items():
        targets = spec.data.targets
        assert (targets is not None) == (spec.training.datamodule == DENSE_DATA), name
        if targets is not None:
            assert targets.task == name and dense_targets(name) is targets and spec.resize == targets.resize
        else:
            with pytest.raises(ValueError, match=f"task '{name}' has no per-pixel targets"):
                dense_targets(name)


def test_each_transformers_class_has_one_task_of_its_own():
    """A released checkpoint records no task: its class's own task (the one not ``shares_class``) is its task."""
    classes = {spec.model.model_class for spec in TASKS.values() if spec.model.model_class}
    for name in classes:
        own = [task for task, spec in TASKS.items() if spec.model.model_class == name and not spec.model.shares_class]
        assert len(own) == 1, (name, own)


def test_unknown_task():
    with pytest.raises(ValueError, match="unknown task 'depth'"):
        task_spec("depth")
    assert task_of_architecture("Sapiens2Model") is None
    assert task_of_config(transformers.Sapiens2Config(architectures=["Sapiens2ForImageMatting"])) == "matting"


def test_label_names():
    assert label_names("pose", "coco17")[:2] == ["nose", "left_eye"]
    assert len(label_names("seg", None)) == 29 and label_names("seg", ["a", "b"]) == ["a", "b"]
    assert label_names("matting", None) == list(TASKS["matting"].model.outputs)


@pytest.mark.parametrize("task", sorted(name for name, spec in TASKS.items() if spec.model.model_class))
def test_task_modules_keep_the_contract(task):
    module = import_class(TASKS[task].training.module)(size="tiny", input_size=(64, 48))
    assert isinstance(module, TaskInterface) and isinstance(module, RunModule)
    assert module.monitor == TASKS[task].training.monitor
    assert set(COMMON_KEYS) <= set(module.hparams)  # the base's arguments, passed through **kwargs
    own = [p for p in inspect.signature(type(module).__init__).parameters if p not in ("self", "kwargs")]
    assert not set(own) & set(COMMON_KEYS)  # declared once, in the base
    assert "_inference_options" not in module.hparams  # the inference object's arguments are the module's own
    # One owner of the model: the module's is the one its inference object runs, whoever sets it.
    stand_in = torch.nn.Linear(1, 1)
    module.model = stand_in
    assert module.inference.model is stand_in
    with pytest.raises(AttributeError, match="runs its module's model"):
        module.inference.model = torch.nn.Linear(1, 1)


@pytest.mark.parametrize("task", ["pose", "seg"])
def test_the_cli_resolves_the_base_arguments_with_their_docs(task, capsys):
    """jsonargparse follows ``**kwargs`` to ``TaskModule.__init__``: every common key is a documented option."""
    with pytest.raises(SystemExit):
        Sapiens2CLI(task, args=["--help"], run=False)
    text = " ".join(capsys.readouterr().out.split())
    linked = {"init_from": "--init_from", "input_size": "--data.input_size"}  # set through their link sources
    for key in COMMON_KEYS:
        assert (linked.get(key) or f"--model.{key}") in text, key
    assert "--model.size SIZE Backbone preset when ``pretrained`` is unset" in text  # the base's docstring
    assert "inference_options" not in text  # what a module hands its inference object is no config key
