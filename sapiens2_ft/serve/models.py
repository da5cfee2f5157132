"""The models a server worker runs, loaded as ``predict`` loads them (``predict.loading.load_inference``: the task's
inference object) and run as ``predict`` runs them (``predict.run.infer_chunk``): the same crops, flip test,
decoding and files, so that an answer is the JSON of what ``predict`` and the Python API give for the same image and
boxes (``predict.result_json``).

A batch of requests is grouped by what shares a forward pass (the model, its keypoint set, a pointmap's focal); the
requests refused while reading are answered as they are, and a group that fails is run again one request at a time,
so that one request never takes the others of its batch down with it.
"""

from __future__ import annotations

import argparse
import logging
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from datamodules.errors import BadInput
from sapiens2_ft.predict.boxes import BoxSource, add_box_arguments, box_source, whole_image
from sapiens2_ft.predict.loading import load_inference
from sapiens2_ft.predict.options import uses_bf16
from sapiens2_ft.predict.result_json import result_json
from sapiens2_ft.predict.run import Model, infer_chunk
from sapiens2_ft.serve.requests import WHOLE_IMAGE, RequestError, Served, ServeRequest
from sapiens2_ft.tasks.inference import TaskInference

logger = logging.getLogger(__name__)

@dataclass
class ModelOptions:
    """What each worker loads: plain data, sent to the worker processes (the models load there, in ``setup``)."""

    models: list[str]  # exported directories (checkpoints exported and hub ids fetched by the command first)
    keypoints: list[str] = field(default_factory=list)  # pose: the keypoint sets served (none: the model's own)
    backend: str = "torch"  # or onnxruntime
    precision: str = "auto"  # auto (bf16 autocast on a GPU with torch), fp32, bf16
    batch_size: int = 8  # person crops per forward pass (pose)
    boxes: dict = field(default_factory=dict)  # box options (predict.boxes.add_box_arguments) of the default source
    threads: int = 0  # torch threads of a CPU worker (0: torch's default)


class RequestBoxes:
    """Pose's boxes for a group of requests: the request's own (or the whole image), else the server's source."""

    def __init__(self, requests: list[ServeRequest], default: BoxSource):
        self.requests, self.default = requests, default

    def __call__(self, keys: list[str], images: list[np.ndarray]) -> list[np.ndarray]:
        boxes: list = [None] * len(keys)
        rest = []
        for k, (key, image) in enumerate(zip(keys, images)):
            given = self.requests[int(key)].boxes
            if isinstance(given, str) and given == WHOLE_IMAGE:
                boxes[k] = whole_image([key], [image])[0]
            elif given is not None:
                boxes[k] = given
            else:
                rest.append(k)
        if rest:
            for k, found in zip(rest, self.default([keys[k] for k in rest], [images[k] for k in rest])):
                boxes[k] = found
        return boxes


class ServedModels:
    """The loaded models of one worker, by task (pose: one per keypoint set), and pose's default box source."""

    def __init__(self, inferences: dict[str, dict[str | None, TaskInference]], source: BoxSource, bf16: bool,
                 batch_size: int, box_words: str = "the whole image"):
        self.inferences, self.source, self.bf16, self.batch_size = inferences, source, bf16, batch_size
        self.box_words = box_words
        self.device_type = next(iter(next(iter(inferences.values())).values())).device.type
        self.served = Served({task: tuple(k for k in sets if k is not None) for task, sets in inferences.items()},
                             {task: () for task in inferences},
                             frozenset(t for t, s in inferences.items() if first(s).takes_person_boxes),
                             frozenset(t for t, s in inferences.items() if first(s).takes_focal))

    @classmethod
    def load(cls, options: ModelOptions, device: str) -> "ServedModels":
        """The models of ``options`` on ``device``, and the files each whole-image one writes (from one warm-up
        prediction on a blank image, which also pays for the first call before the worker says it is ready)."""
        if options.threads and torch.device(device).type == "cpu":
            torch.set_num_threads(options.threads)
        scratch = Path(tempfile.mkdtemp(prefix="sapiens2-ft-serve-"))
        inferences: dict[str, dict[str | None, TaskInference]] = {}
        loaded: dict[str, tuple] = {}
        for k, model in enumerate(options.models):
            sets = options.keypoints if options.keypoints and takes_person_boxes(model) else [None]
            found = [load_inference(model, scratch / str(k), s, device, options.backend) for s in sets]
            inference, task = found[0]
            if task in inferences:
                raise BadInput(f"--model: two {task} models ({model}); give one model per task")
            loaded[model] = inference, task
            inferences[task] = ({i.metainfo.name: i for i, _ in found} if inference.takes_person_boxes else
                                {None: inference})
        bf16 = uses_bf16(options.precision, device, options.backend)
        source, words = default_box_source(options, loaded, scratch, device)
        served = cls(inferences, source, bf16, options.batch_size, words)
        served.warm_up()
        return served

    def warm_up(self) -> None:
        """One prediction per model on a blank image: the first call's cost paid, the files of each task known."""
        blank = np.zeros((64, 48, 3), np.uint8)
        files = {}
        for task, sets in self.inferences.items():
            for keypoints in sets:
                request = ServeRequest(blank, task, WHOLE_IMAGE if first(sets).takes_person_boxes else None,
                                       keypoints)
                result = self.results([request])[0]
                files[task] = () if first(sets).takes_person_boxes else tuple(result.files)
        self.served = Served(self.served.keypoints, files, self.served.takes_boxes, self.served.takes_focal)

    def inference_of(self, request: ServeRequest) -> TaskInference:
        """The model a request asks for: its task's, in the keypoint set it names (else the first served)."""
        sets = self.inferences[request.task]
        return sets[request.keypoints] if request.keypoints is not None else first(sets)

    def results(self, requests: list[ServeRequest]) -> list:
        """The ``Result`` of each request, all of one group (one task, keypoint set and focal), run in one call of
        ``predict``'s ``infer_chunk``."""
        head = requests[0]
        model = Model(self.inference_of(head), head.task, Path("."), head.focal)
        keys = [str(k) for k in range(len(requests))]
        images = [r.image for r in requests]
        with torch.autocast(self.device_type, torch.bfloat16, enabled=self.bf16):
            results = infer_chunk([model], keys, images, RequestBoxes(requests, self.source), self.batch_size)
        return [result[head.task] for result in results]

    def answer(self, requests: list[ServeRequest]) -> list[dict]:
        """The JSON of each request of one group (``result_json``: its result's ``to_dict``, named as uploaded)."""
        return [result_json(result, r.files, name=r.name) for r, result in zip(requests, self.results(requests))]

    def run(self, items: list) -> list:
        """The answer of each item of a batch, in order: a request's JSON, or a ``RequestError`` (one refused while
        reading, or a 500 for a request whose run failed, alone)."""
        answers: list = list(items)
        groups: dict[tuple, list[int]] = {}
        for k, item in enumerate(items):
            if isinstance(item, ServeRequest):
                groups.setdefault((item.task, item.keypoints, item.focal), []).append(k)
        for indices in groups.values():
            try:
                for k, answer in zip(indices, self.answer([items[k] for k in indices])):
                    answers[k] = answer
            except Exception:  # noqa: BLE001 - one request's failure is its own: the others are run alone
                logger.exception("a batch of %d requests failed; running them one at a time", len(indices))
                for k in indices:
                    try:
                        answers[k] = self.answer([items[k]])[0]
                    except Exception:  # noqa: BLE001
                        logger.exception("a request failed")
                        answers[k] = RequestError(500, "the model failed on this request (the server's log has "
                                                       "the error)")
        return answers


def takes_person_boxes(model: str) -> bool:
    """Whether the exported model at ``model`` is of a task that crops person boxes (its config's task, declared on
    its inference class), read before its weights are loaded."""
    from transformers import Sapiens2Config

    from sapiens2_ft.tasks.saved_model import inference_class_of

    return inference_class_of(Sapiens2Config.from_pretrained(model, trust_remote_code=False)).takes_person_boxes


def first(sets: dict):
    return next(iter(sets.values()))


def box_defaults() -> dict:
    """The box options' defaults, as ``predict`` and the web demo have them."""
    parser = argparse.ArgumentParser()
    add_box_arguments(parser)
    return vars(parser.parse_args([]))


def default_box_source(options: ModelOptions, loaded: dict, scratch: Path, device: str) -> tuple[BoxSource, str]:
    """Pose's boxes when a request gives none, as the web demo finds them: ``--detector``, ``--boxes_from_seg``,
    else a seg (or matting) model among ``--model``, else the whole image; and the source in words."""
    if not any(inference.takes_person_boxes for inference, _ in loaded.values()):
        return whole_image, "the whole image"
    args = argparse.Namespace(**{**box_defaults(), **options.boxes}, device=device)
    if not (args.detector or args.boxes_from_seg):
        args.boxes_from_seg = next((name for name, (inference, _) in loaded.items() if inference.finds_people), None)
    source = box_source(args, scratch, loaded) or whole_image
    words = (f"the person detector {args.detector}" if args.detector else
             f"the people {args.boxes_from_seg} finds" if args.boxes_from_seg else "the whole image")
    return source, words
