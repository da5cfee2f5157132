"""The task registry is the one list of tasks, and every task module keeps the base's contract."""

from __future__ import annotations

import inspect

import pytest
import transformers

from datamodules.dense.targets import TARGETS
from sapiens2_ft.tasks.base import RunModule, TaskInterface, TaskModule
from sapiens2_ft.tasks.registry import (
    TASK_KEY,
    TASKS,
    import_class,
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
    module = import_class(spec.module)
    assert module.task == task
    assert issubclass(import_class(spec.datamodule), __import__("lightning").LightningDataModule)
    assert spec.monitor[1] in ("max", "min") and spec.monitor[0].startswith("val/")
    if spec.model_class is None:
        assert spec.predictor is None
        with pytest.raises(ValueError, match="no single transformers model"):
            model_class(task)
        return
    assert model_class(task) is getattr(transformers, spec.model_class)
    # its model card's loading example and Hub task: the Auto class gives its class; a tag the Hub knows, or none
    assert getattr(transformers, spec.auto_class)._model_mapping[transformers.Sapiens2Config] is model_class(task)
    assert spec.pipeline_tag in (None, "keypoint-detection", "image-segmentation", "depth-estimation") and spec.predicts
    # Tasks may share a class: an export records its task, which wins over the class's first task.
    assert task_of_config(transformers.Sapiens2Config(architectures=[spec.model_class], **{TASK_KEY: task})) == task
    assert task_spec(task_of_architecture(spec.model_class)).model_class == spec.model_class
    assert issubclass(module, TaskModule) and spec.predictor in ("crops", "images")
    assert callable(getattr(module, "picture", None)) and spec.draw_sample is not None  # its one drawing
    assert "0.4b" in spec.heads and "tiny" in spec.heads  # the fallback layout and the CPU-sized one
    assert bool(spec.outputs) != bool(spec.label_arg)  # fixed channels, or a label set given by one argument
    if spec.label_arg:
        assert spec.label_arg in inspect.signature(module.__init__).parameters
        assert spec.released_labels is not None and len(spec.released_labels()) > 0


def test_dense_tasks_are_the_data_layers_target_specs():
    dense = {name for name, spec in TASKS.items() if spec.targets is not None}
    assert dense == set(TARGETS)
    assert all(TASKS[name].targets is TARGETS[name] and TARGETS[name].task == name for name in dense)


def test_unknown_task():
    with pytest.raises(ValueError, match="unknown task 'depth'"):
        task_spec("depth")
    assert task_of_architecture("Sapiens2Model") is None
    assert task_of_config(transformers.Sapiens2Config(architectures=["Sapiens2ForImageMatting"])) == "matting"


def test_label_names():
    assert label_names("pose", "coco17")[:2] == ["nose", "left_eye"]
    assert len(label_names("seg", None)) == 29 and label_names("seg", ["a", "b"]) == ["a", "b"]
    assert label_names("matting", None) == list(TASKS["matting"].outputs)


@pytest.mark.parametrize("task", sorted(name for name, spec in TASKS.items() if spec.model_class))
def test_task_modules_keep_the_contract(task):
    module = import_class(TASKS[task].module)(size="tiny", input_size=(64, 48))
    assert isinstance(module, TaskInterface) and isinstance(module, RunModule)
    assert module.monitor == TASKS[task].monitor
    assert set(COMMON_KEYS) <= set(module.hparams)  # the base's arguments, passed through **kwargs
    own = [p for p in inspect.signature(type(module).__init__).parameters if p not in ("self", "kwargs")]
    assert not set(own) & set(COMMON_KEYS)  # declared once, in the base


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
