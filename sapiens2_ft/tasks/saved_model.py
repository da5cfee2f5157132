"""A task model saved as a Hugging Face directory (an export, a released hub model) as its inference object: the
task its config records, the label set, the input size of its ``preprocessor_config.json``, the weights. Nothing of
the training stack is imported on the way."""

from __future__ import annotations

from pathlib import Path

from datamodules.boundary.files import read_json
from datamodules.errors import BadInput
from sapiens2_ft.tasks.inference import TaskInference
from sapiens2_ft.tasks.registry import TASKS, inference_class, task_of_config

PREPROCESSOR_FILE = "preprocessor_config.json"


class SavedModelError(BadInput):
    """A directory holds no model this installation runs; the message says what it holds."""


def exported_input_size(directory: Path, config) -> list[int]:
    """(H, W) an exported model runs at: its ``preprocessor_config.json`` size, else its config's image size."""
    input_size = list(config.image_size)
    if (Path(directory) / PREPROCESSOR_FILE).is_file():
        size = read_json(Path(directory) / PREPROCESSOR_FILE).get("size") or {}
        input_size = [size.get("height", input_size[0]), size.get("width", input_size[1])]
    return input_size


def inference_class_of(config) -> type[TaskInference]:
    """The inference class of the task a model's config records (or its architecture's); ``SavedModelError`` for a
    task this installation lacks or one that is not run on its own (a pretrain-only backbone)."""
    task = task_of_config(config)
    if task is not None and task not in TASKS:
        raise SavedModelError(f"a model of task '{task}', which this installation does not have (known: "
                              f"{', '.join(TASKS)})")
    found = inference_class(task) if task is not None else None
    if found is None:
        raise SavedModelError(f"a {(config.architectures or ['Sapiens2Model'])[0]}, not a Sapiens2 task model")
    return found


def load_inference(directory: str | Path, labels=None, config=None) -> TaskInference:
    """The inference object of the model saved in ``directory``, in eval mode on the CPU. ``labels``: the label set
    to run (pose: a keypoint set; seg: class names), its rows taken from the model's by name; None: the model's own
    (``TaskInference.options_from_model``: a ValueError names what does not fit). ``config``: its
    ``Sapiens2Config``, when already read."""
    from transformers import Sapiens2Config

    directory = Path(directory)
    config = config if config is not None else Sapiens2Config.from_pretrained(directory, trust_remote_code=False)
    cls = inference_class_of(config)
    inference = cls(exported_input_size(directory, config), **cls.options_from_model(directory, config, labels))
    inference.model, inference.load_report = inference.build(pretrained=str(directory))
    return inference.to("cpu")
