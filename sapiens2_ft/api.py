"""The Python API (docs/python_api.md): ``train``, ``load`` and ``export``, thin wrappers over the code the commands
run (``train.py``, ``python -m sapiens2_ft.predict``, ``python -m sapiens2_ft.export``). ``import sapiens2_ft``
reaches them lazily: ``sapiens2_ft.train(...)``, ``sapiens2_ft.load(...)``, ``sapiens2_ft.export(...)``.

Overrides of ``train`` are keyword arguments named like the command-line keys with ``__`` for each dot:
``trainer__max_steps=2`` is ``--trainer.max_steps 2``, ``model__optim__lr=1e-4`` is ``--model.optim.lr 0.0001``.
A string value is passed as it is; any other value as JSON (lists, dicts, booleans, None), which the command
line reads as YAML.
"""

from __future__ import annotations

import json
import tempfile
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Iterator, Sequence, Union

import numpy as np

from datamodules.errors import BadInput, Sapiens2FTError
from sapiens2_ft.problems import raise_problems

if TYPE_CHECKING:
    from sapiens2_ft.predict.result import Result

ImagesLike = Union[str, Path, np.ndarray, Sequence[Union[str, Path, np.ndarray]]]


CommandError = Sapiens2FTError  # its name in earlier releases: every error the API raises is a Sapiens2FTError


def override_args(overrides: dict) -> list[str]:
    """``{"trainer__max_steps": 2}`` -> ``["--trainer.max_steps", "2"]`` (see the module docstring)."""
    args = []
    for name, value in overrides.items():
        key = name.replace("__", ".")
        args += [f"--{key}", value if isinstance(value, str) else str(value) if isinstance(value, Path)
                 else json.dumps(value)]
    return args


def train(config: str | Path | Sequence[str | Path], **overrides) -> dict:
    """Fine-tune as ``python train.py --config CONFIG [--key value ...]`` does, in this process.

    Args:
        config: A recipe name (``pose_demo.yaml``, see ``sapiens2-ft train --list-configs``), a path to your own
            file (it wins over a name), or several of them, merged in order.
        **overrides: Config keys with ``__`` for the dots: ``trainer__max_steps=2``, ``run_dir="runs/try1"``,
            ``data__root="/data/people"``.

    Returns:
        The run summary (``<run_dir>/summary.json``): ``run_dir``, ``metrics``, ``best_checkpoint``, ``export``
        (the exported model directory, for ``load``), ...
    A bad config or argument raises a ``Sapiens2FTError`` (``BadConfig``, ``NotFound``, ...) with the command's
    message. Several devices: Lightning's launcher starts the other ranks by re-running the command, which a
    notebook cannot do; train on several GPUs with ``sapiens2-ft train`` (or ``python train.py``).
    """
    configs = [config] if isinstance(config, (str, Path)) else list(config)
    args = [arg for c in configs for arg in ("--config", str(c))] + override_args(overrides)
    from sapiens2_ft.training.cli import train as run

    return run(args, parser_exits=False)


def export(checkpoint: str | Path, out: str | Path, push_to_hub: str | None = None, private: bool = False,
           overwrite: bool = False) -> Path:
    """A training checkpoint (``.ckpt`` or FSDP2 directory) as a Hugging Face model directory ``out`` with its model
    card, as ``python -m sapiens2_ft.export`` writes it; optionally uploaded to the Hub repo ``push_to_hub``
    (``private``: a new repository is private). A refusal of the Hub is a ``HubError`` (a ``Refused``) of one line.
    ``overwrite``: ``out`` may hold other files (the export's own are replaced, the others stay)."""
    from sapiens2_ft.training.hf_export import export_checkpoint

    return export_checkpoint(checkpoint, out, push_to_hub, private, overwrite)


def load(model: str | Path, device: str | None = None, keypoints: str | None = None,
         precision: str = "auto") -> "Predictor":
    """The model of ``python -m sapiens2_ft.predict --model MODEL``: an exported directory (``summary["export"]``),
    a hub id, or a training checkpoint (exported to a temporary folder first). ``device``: default ``cuda`` when
    there is one; ``keypoints``: pose, a keypoint set when the directory has none; ``precision``: ``auto`` (bf16
    autocast on a GPU), ``fp32`` or ``bf16``. An exported directory or hub id loads without the training stack
    (Lightning, wandb, pycocotools, torchmetrics are not imported)."""
    import torch

    from sapiens2_ft.predict.loading import load_inference
    from sapiens2_ft.predict.options import option_problems, uses_bf16

    raise_problems(option_problems("", precision=precision))
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    scratch = Path(tempfile.gettempdir()) / f"sapiens2-ft-load-{uuid.uuid4().hex[:8]}"  # created for checkpoints only
    inference, task = load_inference(str(model), scratch, keypoints, device)
    return Predictor(inference, uses_bf16(precision, device))


Boxes = Union[None, str, Sequence[np.ndarray], Callable[[list], list]]


class Predictor:
    """A loaded task model. ``predict(images)`` gives one ``Result`` per image (``sapiens2_ft.predict.result``),
    whatever the task, as ``python -m sapiens2_ft.predict`` computes it (same crops, flip test, decoding and
    resizing): ``name`` (the image's path relative to a folder given, the path given, or None for an array), ``size``,
    ``people`` (boxes, keypoints, scores; empty for a whole-image task), ``maps`` (each output at the image's size;
    empty for pose), ``files`` (what predict writes), ``to_json()``, ``plot()``, ``save(directory)``.

    Attributes: ``task``, ``labels`` (keypoint or class names), ``inference`` (the task's inference object,
    ``sapiens2_ft.tasks.inference.TaskInference``: its model, pictures, findings).
    """

    def __init__(self, inference, bf16: bool = False):
        self.inference, self.task, self.bf16 = inference, inference.task, bf16
        self._detector = None
        self.labels = list(inference.labels)

    def predict(self, images: ImagesLike, boxes: Boxes = None, batch_size: int = 8,
                focal: float | None = None) -> list[Result]:
        """Results for ``images``: a path (image or folder), an RGB uint8 array (H, W, 3), or a list of either.

        ``boxes`` (pose): None (the people the default person detector finds, ``models.detector.PersonDetector()``,
        loaded once), ``"whole_image"`` (each image is one person), one ``[x, y, w, h(, score)]`` array per image,
        or a callable mapping a list of images to such arrays (e.g. a ``PersonDetector`` of your choice).
        ``focal`` (pointmap): the camera's fx in the images' pixels; metric points by it, not the predicted focal.
        A bad argument (a box that is not finite or has no area, an image that is not RGB uint8, ...) is a
        ``BadInput`` naming it, checked as the command line checks its own.
        """
        from sapiens2_ft.predict.run import infer_chunk

        self._check(boxes, batch_size, focal)
        names, arrays = read_images(images)
        if boxes is not None and not callable(boxes) and not isinstance(boxes, str) and len(boxes) != len(arrays):
            raise BadInput(f"boxes: {len(boxes)} entries for {len(arrays)} images (one array per image)")
        model, results = self._model(focal), []
        with self._autocast():
            for start in range(0, len(arrays), batch_size):
                chunk = arrays[start:start + batch_size]
                results += [found[self.task] for found in infer_chunk(
                    [model], names[start:start + batch_size], chunk, self._box_source(boxes, start), batch_size,
                    maps=True)]
        return results

    def stream(self, frames: Iterable, fps: float = 30.0, boxes: Boxes = None, smooth=False, batch_size: int = 8,
               focal: float | None = None) -> Iterator[Result]:
        """Results for the frames of a video, in order, as they come (``batch_size`` frames at a time): ``predict``'s
        result of each frame with ``frame`` (its index) and ``time`` (index / ``fps``); pose people also get a
        ``track_id`` (``predict``'s IoU tracker over their boxes). ``frames``: an iterable of RGB uint8 arrays or
        image paths. ``boxes`` (pose): as ``predict``'s (None: the default person detector), one array per frame.

        ``smooth``: True (the defaults) or a ``sapiens2_ft.predict.smoothing.SmoothOptions``: each track's keypoints
        One-Euro-filtered and, with its ``map_weight`` below 1, dense maps blended over the frames, as
        ``predict --smooth`` / ``--smooth_maps`` do for a video file; False: each frame on its own.
        """
        from sapiens2_ft.predict.run import infer_chunk
        from sapiens2_ft.predict.smoothing import SmoothOptions
        from sapiens2_ft.predict.video import VideoPeople, chunks, map_blends

        options = SmoothOptions() if smooth is True else smooth or None
        self._check(boxes, batch_size, focal, fps, [f"smooth: {p}" for p in options.problems()] if options else [])
        model, people, index = self._model(focal), VideoPeople(fps, options), 0
        smooth_maps = map_blends([model], options)
        for chunk in chunks(frames, batch_size):
            names, arrays = read_images(chunk)
            with self._autocast():
                found = infer_chunk([model], names, arrays, self._box_source(boxes, index), batch_size,
                                    smooth_maps=smooth_maps, maps=True)
            for result in (f[self.task] for f in found):
                people(list(result.people))  # track ids and smoothed keypoints, in place
                result.frame, result.time = index, index / fps
                yield result
                index += 1

    def _check(self, boxes: Boxes, batch_size: int, focal: float | None, fps: float | None = None,
               more: Sequence[str] = ()) -> None:
        """Every problem of the arguments at once, checked as predict checks its options (``predict.run``)."""
        from sapiens2_ft.predict.options import model_problems, option_problems

        given = ["boxes"] if boxes is not None else []
        raise_problems([*option_problems("", batch_size, focal, fps),
                        *model_problems("", [self.inference], focal, given, "this model"), *more])

    def _model(self, focal: float | None):
        from sapiens2_ft.predict.run import Model

        return Model(self.inference, self.task, focal=focal)

    def _autocast(self):
        import torch

        return torch.autocast(self.inference.device.type, dtype=torch.bfloat16, enabled=self.bf16)

    def _box_source(self, boxes: Boxes, start: int):
        """predict's ``BoxSource`` of ``boxes`` for the chunk of images from ``start``; None for a model that takes
        no boxes."""
        from sapiens2_ft.predict.boxes import DetectorBoxes, whole_image

        if not self.inference.takes_person_boxes:
            return None
        if boxes is None:
            return DetectorBoxes(self.detector())
        if isinstance(boxes, str):
            if boxes != "whole_image":
                raise BadInput(f"boxes: {boxes!r} is not a box source ('whole_image', arrays or a callable)")
            return whole_image
        return lambda keys, images: person_boxes(boxes, images, start)

    def detector(self):
        """The default person detector on this model's device, loaded at the first use."""
        if self._detector is None:
            from sapiens2_ft.models.detector import DEFAULT_DETECTOR, DetectorError, PersonDetector

            try:
                self._detector = PersonDetector(device=str(self.inference.device))
            except DetectorError as err:
                raise err.with_message(
                    f"predict: {err}\nPose needs the people's boxes: boxes=PersonDetector(DIR) (a local copy of "
                    f"{DEFAULT_DETECTOR} or another detector), one box array per image, or boxes='whole_image' (each "
                    f"image is one person)") from None
        return self._detector

    def __repr__(self) -> str:
        return f"Predictor(task={self.task!r}, labels={len(self.labels)}, device={self.inference.device})"


def person_boxes(boxes: Boxes, images: list[np.ndarray], start: int) -> list[np.ndarray]:
    """(N, 5) ``[x, y, w, h, score]`` per image of a chunk starting at image ``start``: the given arrays, or what the
    callable gives, each row checked as a ``--boxes`` file's (``predict.boxes.box_arrays``)."""
    from sapiens2_ft.predict.boxes import box_arrays

    found = boxes(images) if callable(boxes) else boxes[start:start + len(images)]
    if len(found) != len(images):
        raise BadInput(f"boxes: {len(found)} arrays for {len(images)} images (one array per image)")
    return box_arrays(found, start)


def read_images(images: ImagesLike) -> tuple[list, list[np.ndarray]]:
    """(names, RGB uint8 arrays) of a path (image or folder), an array or a list of either."""
    from datamodules.boundary.images import read_image
    from sapiens2_ft.predict.inputs import list_images

    if isinstance(images, (str, Path)):
        listed = list_images(Path(images))
        return list(listed), [read_image(str(p)) for p in listed.values()]
    items = [images] if isinstance(images, np.ndarray) else list(images)
    names, arrays = [], []
    for k, item in enumerate(items):
        if isinstance(item, (str, Path)):
            names.append(str(item))
            arrays.append(read_image(str(item)))
            continue
        array = np.asarray(item)
        if array.ndim != 3 or array.shape[2] != 3 or array.dtype != np.uint8 or 0 in array.shape:
            raise BadInput(f"image {k}: expected an RGB uint8 array (H, W, 3) of at least one pixel, got "
                           f"{array.dtype} {array.shape}")
        names.append(None)
        arrays.append(np.ascontiguousarray(array))
    return names, arrays
