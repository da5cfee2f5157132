"""What a task does with a trained model, apart from training: the inference object.

A :class:`TaskInference` holds a task's model and what runs it (input size, label set, the task's own options) and
does all a prediction needs: the forward pass (``predict``), the decoding validation scores (``infer``: pose's flip
test and DARK-UDP decode), whole images in and maps at their own pixels out (``image_outputs``), the files and
pictures of one prediction, what it found, where its people are. The task's LightningModule (``tasks/base.py``)
holds one and validates through it; ``predict``, ``evaluate``, the web demo and the Python API use it on their own
(``tasks/saved_model.py`` loads one from an exported directory). It imports no Lightning, wandb, pycocotools nor
torchmetrics: a trained model runs without the training stack.

What the apps may ask of a task is declared here as class attributes (``takes_person_boxes``, ``finds_people``,
``takes_focal``, ``people_only_pictures``, ``downloads``), never guessed from its name or its methods. Whole-image
tasks use the methods below as they are; a top-down task (``takes_person_boxes``) runs on person crops instead (pose's
``estimate``).
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from typing import ClassVar, Mapping, Protocol, Sequence, TypedDict

import numpy as np
import torch
from torch import nn

from datamodules.boundary.writes import encode_array, encode_image, write_bytes
from datamodules.dense.geometry import letterbox_matrix, stretch_matrix
from datamodules.dense.pipelines import LETTERBOX
from datamodules.transforms import affine
from sapiens2_ft.models.factory import LoadReport, label_rows
from sapiens2_ft.models.preprocessing import normalize_images
from sapiens2_ft.tasks.dense_maps import unwarp
from sapiens2_ft.tasks.spec import TaskSpec
from sapiens2_ft.tasks.task_model import build_task_model
from sapiens2_ft.tasks.sample_pictures import SheetLabels


class Batch(TypedDict, total=False):
    """What every task's batch holds (a task's batch type adds its targets)."""

    image: torch.Tensor  # (B, 3, H, W) uint8 RGB at the network input size
    name: list[str]  # the samples' names: their files in <run_dir>/predictions/
    padding: torch.Tensor  # (B,) bool: repeats that even out the processes' batch counts (not scored)
    mask: torch.Tensor  # (B, [1,] H, W) bool: the pixels whose target is known (dense tasks that have one)


Outputs = Mapping[str, torch.Tensor]  # a task's outputs by name, each (B, ...); each task declares its own keys
Files = dict[str, np.ndarray]  # file suffix -> array: ``.png`` uint8 maps (BGR pictures), ``.npy`` float arrays,
# ``.txt`` a matrix as whitespace text, ``ENCODED`` suffixes the file's bytes (uint8, 1-D): a ``.ply`` point cloud
ENCODED = (".ply",)


def output_name(key: str) -> str:
    """An image key (its path relative to the input folder) without its suffix: the stem of its files."""
    return PurePosixPath(key).with_suffix("").as_posix()


def file_bytes(suffix: str, array: np.ndarray) -> bytes:
    """The bytes of the file ``NAME<suffix>`` of one of ``Files``' arrays: an ``.npy`` array, an encoded file
    (``ENCODED``) as it is, a ``.txt`` matrix as rows of numbers, else a picture encoded by the suffix (cv2)."""
    if suffix.endswith(".npy"):
        return encode_array(array)
    if suffix.endswith(ENCODED):
        return array.tobytes()
    if suffix.endswith(".txt"):
        return "".join(" ".join(f"{v:.9g}" for v in row) + "\n" for row in array).encode("ascii")
    return encode_image(f"NAME{suffix}", array)  # a bare ".jpg" is a dotfile's name to pathlib


def write_arrays(directory: Path, name: str, files: Files) -> None:
    """``directory/NAME<suffix>`` for each array, as ``file_bytes`` (subfolders of NAME made)."""
    for suffix, array in files.items():
        write_bytes(directory, f"{name}{suffix}", file_bytes(suffix, array))


class ResultWriter(Protocol):
    """What ``predict`` writes of one model, image by image (``TaskInference.writer``)."""

    def add(self, key: str, image_id: int, image: np.ndarray, result) -> None:
        """One image's result (``key``: its path relative to the input folder; ``image``: RGB uint8)."""

    def close(self) -> int:
        """Finish the files; returns how many results were written (pose: people; the others: images)."""

    def summary(self, count: int, images: int) -> str:
        """What was written, in a phrase for predict's last line."""


class ImageFiles:
    """Each image's files (``TaskInference.files``) as ``OUT/NAME<suffix>``."""

    def __init__(self, out: Path, task: str):
        self.out, self.task, self.count = out, task, 0

    def add(self, key: str, image_id: int, image: np.ndarray, result: Files) -> None:
        write_arrays(self.out, output_name(key), result)
        self.count += 1

    def close(self) -> int:
        return self.count

    def summary(self, count: int, images: int) -> str:
        return f"{self.task} maps of {count} images -> {self.out}"


class TaskInference:
    """A task's trained model and everything prediction does with it (see the module docstring).

    ``model``: the transformers model (or a stand-in called the same way, such as ``models.onnx.OnnxModel``), built
    by ``build`` or given; or, held by the task's LightningModule (``held_by``), the model that module owns;
    ``input_size``: the network input (H, W).
    """

    spec: ClassVar[TaskSpec]  # the task's spec (``tasks/<task>/spec.py``)
    takes_person_boxes: ClassVar[bool] = False  # runs on one crop per person box (top-down), not on whole images
    finds_people: ClassVar[bool] = False  # ``people``: where the people are in its outputs (boxes, masks)
    takes_focal: ClassVar[bool] = False  # ``with_focal``: its outputs take a known camera's focal length
    people_only_pictures: ClassVar[bool] = False  # its pictures show the people alone, where a model found them
    downloads: ClassVar[tuple[str, ...]] = ()  # suffixes of ``files`` the web demo offers for download
    pseudo_labels: ClassVar[str | None] = None  # what its predictions are written as for training (pseudo_labels.py)

    def __init__(self, input_size: Sequence[int] = (256, 192), model: nn.Module | None = None):
        self.input_size = (int(input_size[0]), int(input_size[1]))
        self._model, self._holder = model, None
        self.labels: list[str] = list(self.spec.model.outputs)  # a label-set task sets its own
        self.load_report: LoadReport | None = None  # what ``build`` did with the weights, when it built the model
        self._device = torch.device("cpu")

    @property
    def task(self) -> str:
        """The task's name (its spec's)."""
        return self.spec.name

    @property
    def model(self) -> nn.Module | None:
        """The model it runs: its own, or the one of the module that holds it (one owner)."""
        return self._holder.model if self._holder is not None else self._model

    @model.setter
    def model(self, model: nn.Module | None) -> None:
        if self._holder is not None:
            raise AttributeError(f"this {self.task} inference object runs its module's model: set the module's")
        self._model = model

    def held_by(self, holder) -> "TaskInference":
        """Run the model ``holder`` owns (its task's LightningModule, whoever sets that module's ``model``)."""
        self._holder = holder
        return self

    @property
    def device(self) -> torch.device:
        """Where the model runs: its parameters' device (a stand-in without parameters: the one given to ``to``)."""
        parameter = next(self.model.parameters(), None) if isinstance(self.model, nn.Module) else None
        return parameter.device if parameter is not None else self._device

    def to(self, device: str | torch.device) -> "TaskInference":
        """The model in eval mode on ``device``."""
        self._device = torch.device(device)
        if isinstance(self.model, nn.Module):
            self.model.eval().to(self._device)  # in place
        return self

    # -- the model -------------------------------------------------------------------------------

    def model_options(self) -> dict:
        """Extra ``build_task_model`` arguments of the task (pose: its flip pairs)."""
        return {}

    def build(self, init_from: str | None = None, pretraining_head: bool = False,
              **source) -> tuple[nn.Module, LoadReport]:
        """This task's model for its labels and input size (``tasks.task_model.build_task_model``; ``source``: the
        ``models.factory.ModelSource`` fields, ``pretrained``, ``size``, ``head``, ...)."""
        return build_task_model(self.spec, self.labels, self.input_size, init_from, pretraining_head,
                                **self.model_options(), **source)

    def checkpoint_record(self) -> dict:
        """What a checkpoint keeps beside the model's config to run it again (pose: its keypoint set)."""
        return {}

    @classmethod
    def options_from_model(cls, directory: Path, config, labels=None) -> dict:
        """Arguments of this class that run a saved model (an export, a released hub model) as it was trained: its
        label set and what its config records. ``labels``: the label set asked for (seg: class names), its rows
        chosen from the model's by name; None: the model's own. A name the model lacks, or labels for a task of
        fixed outputs, is a ValueError naming them."""
        spec = cls.spec.model
        if spec.label_arg is None:
            if labels is not None:
                raise ValueError(f"a {cls.spec.name} model has fixed outputs {list(spec.outputs)}; it takes no label "
                                 "set")
            return {}
        if labels is None:
            names = cls.row_names(directory, config)
            if names is None:
                raise ValueError(f"{directory}: its {config.num_labels} {spec.label_kind} rows have no names; give "
                                 f"the {spec.label_kind} names")
            return {spec.label_arg: names}
        cls.check_rows(directory, config, list(labels))
        return {spec.label_arg: list(labels)}

    @classmethod
    def row_names(cls, directory: Path, config) -> list[str] | None:
        """The names of a saved model's output rows: its config's, else the released ones when their count fits
        (a released hub model names none); None when unnamed."""
        spec = cls.spec.model
        rows = label_rows(config, spec.released_labels() if spec.released_labels else ())
        return sorted(rows, key=rows.get) if rows else None

    @classmethod
    def check_rows(cls, directory: Path, config, names: list[str]) -> None:
        """A ValueError unless every one of ``names`` is an output row of the saved model (unnamed rows: only a
        label set of their count fits, row for row)."""
        kind = cls.spec.model.label_kind
        rows = cls.row_names(directory, config)
        if rows is None:
            if len(names) != config.num_labels:
                raise ValueError(f"{directory}: its {config.num_labels} {kind} rows have no names, {len(names)} "
                                 f"{kind}s were asked for")
            return
        missing = [n for n in names if n not in rows]
        if missing:
            raise ValueError(f"{directory} has no {kind} {missing[:20]}{' ...' if len(missing) > 20 else ''} "
                             f"({len(missing)} of the {len(names)} asked for); its {len(rows)} {kind}s: "
                             f"{rows[:40]}{' ...' if len(rows) > 40 else ''}")

    # -- the forward pass -----------------------------------------------------------------------

    def predict(self, pixel_values: torch.Tensor, size: Sequence[int] | None = None) -> Outputs:
        """Normalised images (B, 3, H, W) -> what the loss needs, maps at ``size`` (None: as predicted)."""
        raise NotImplementedError

    def infer(self, pixel_values: torch.Tensor, size: Sequence[int] | None = None) -> Outputs:
        """What validation scores and ``predict`` writes (``predict``'s outputs; pose adds flip test + decode)."""
        return self.predict(pixel_values, size)

    def with_focal(self, outputs: Outputs, focal: torch.Tensor) -> Outputs:
        """``outputs`` made metric by a known camera's ``focal`` (B,) fx in input pixels (``takes_focal``)."""
        raise NotImplementedError

    # -- whole images ---------------------------------------------------------------------------

    def fit_matrix(self, shape: Sequence[int]) -> np.ndarray:
        """The 2x3 affine from an image of ``shape`` (H, W) to the network input: the task's validation resize
        (``TaskSpec.resize``: letterboxed or stretched)."""
        fit = letterbox_matrix if self.spec.resize == LETTERBOX else stretch_matrix
        return fit(tuple(shape[:2]), self.input_size)

    def image_outputs(self, images: list[np.ndarray], focal: float | None = None) -> list[Outputs]:
        """``infer``'s outputs for whole RGB images, each mapped back to its image's pixels (the validation resize
        of the task's training pipeline: stretched for seg, letterboxed otherwise): per image, maps (1, C, H, W)
        at its size and per-image values (1, ...). ``focal``: the images' fx in their own pixels (a calibrated
        camera), for a task that ``takes_focal``."""
        if focal is not None and not self.takes_focal:
            raise ValueError(f"focal: only models with a metric scale (pointmap) take a known focal; this one is "
                             f"{self.task}")
        if focal is not None and not focal > 0:
            raise ValueError(f"focal: the focal length in pixels must be > 0, got {focal}")
        matrices = [self.fit_matrix(image.shape[:2]) for image in images]
        crops = np.stack([affine.warp_image(image, m, self.input_size) for image, m in zip(images, matrices)])
        device = self.device
        outputs = self.infer(normalize_images(torch.from_numpy(crops).permute(0, 3, 1, 2).to(device)))
        if focal is not None:  # fx of the warped input: the first row of the warp times K (datamodules' intrinsics)
            outputs = self.with_focal(outputs, torch.tensor([m[0, 0] * focal for m in matrices], device=device))
        return [{name: value[i:i + 1] if value.ndim < 4 else unwarp(value[i:i + 1], m, self.input_size, image.shape[:2])
                 for name, value in outputs.items()} for i, (image, m) in enumerate(zip(images, matrices))]

    def files(self, outputs: Outputs, i: int, image: np.ndarray, mask: torch.Tensor | None = None) -> Files:
        """The files of sample ``i`` of ``outputs`` (``Files``; {} for none): what validation keeps in
        ``<run_dir>/predictions/`` and ``predict`` writes. ``image``: its RGB input (H, W, 3) uint8; ``mask``: where
        its pictures show the map (H, W) bool (validation: the known pixels; predict: the people), or None."""
        return {}

    def writer(self, out: Path) -> ResultWriter:
        """What ``predict`` writes into ``out`` (whole-image tasks: each image's ``files``)."""
        return ImageFiles(out, self.task)

    # -- what predict draws and reports ----------------------------------------------------------

    def picture(self, result, image: np.ndarray, people: np.ndarray | None) -> tuple[str, np.ndarray]:
        """(title, RGB picture) of one image's prediction for predict's sheets and videos (``result``: pose's people,
        a whole-image task's ``files``); ``people`` (H, W) bool where another model found them."""
        raise NotImplementedError

    def sheet_legend(self, row: np.ndarray, result) -> np.ndarray:
        """Predict's sheet ``row`` with this task's legend below it (seg: the classes of ``result``)."""
        return row

    def sheet_labels(self) -> SheetLabels:
        """Its label set as the data sheet draws it (pose: the keypoint set; seg: the class names)."""
        return SheetLabels()

    def findings(self, result) -> dict:
        """What one image's prediction (``result``, as for ``picture``) found, as plain JSON data (the web demo's
        answer): pose's people, seg's class areas, ...; {} for a task with nothing to count."""
        return {}

    def people(self, outputs: Outputs) -> tuple[torch.Tensor, torch.Tensor] | None:
        """Where the people are in one image's outputs (``image_outputs``): (foreground (H, W) bool, its probability
        (H, W) float) on the CPU, for a task that ``finds_people``; None otherwise."""
        return None

    def people_heads(self, outputs: Outputs) -> torch.Tensor | None:
        """Where the people's heads are in one image's outputs: (H, W) bool on the CPU, one blob per head, to split
        people who touch (``predict.boxes.PeopleBoxes``); None for a task (or a label set) without heads."""
        return None
