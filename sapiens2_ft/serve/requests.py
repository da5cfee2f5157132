"""What a ``POST /predict`` body may hold, read and checked before anything runs: one image and its options.

A body is JSON (``{"image": BASE64, "task": ..., "boxes": ..., ...}``) or a multipart form (the file in the ``image``
field, each option a field; ``boxes`` and ``files`` as JSON text). The image is bytes, never a path or a URL: the
server reads no file and fetches nothing. Its bytes go through the boundary (``datamodules/boundary/images.py``): the
size its header declares is checked against the pixel limit before anything is decoded, then it is decoded as
``predict`` decodes a file. Every refusal is a :class:`RequestError` with its HTTP status and a message naming the
field; the server answers it and goes on.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from datamodules.boundary.images import decode_rgb, header_size
from datamodules.errors import DataError
from sapiens2_ft.predict.boxes import MAX_COORDINATE

FIELDS = ("image", "task", "boxes", "keypoints", "focal", "files", "name")
WHOLE_IMAGE = "whole_image"
_DATA_URL = re.compile(r"^data:[\w.+/-]*;base64,")
_NOT_BASE64 = re.compile(r"^([a-z][a-z0-9+.-]*:|[/~.]|[A-Za-z]:\\)")  # a URL, an absolute or relative path


@dataclass(frozen=True)
class ServeLimits:
    """What one request may ask of the server."""

    max_bytes: int = 20 << 20  # a request body (the image in base64 is 4/3 of its file)
    max_pixels: int = 40_000_000  # an image's width x height, read from its header before it is decoded
    max_boxes: int = 100  # person boxes of one image (pose crops one per box)


class RequestError(ValueError):
    """A request the server refuses: ``status`` (4xx) and a message naming the field, answered as
    ``{"detail": message}``."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message


@dataclass
class ServeRequest:
    """One request, read and checked: the RGB uint8 image (H, W, 3) and its options."""

    image: np.ndarray
    task: str
    boxes: np.ndarray | None = None  # (N, 5) [x, y, w, h, score]; None: the server's box source
    keypoints: str | None = None  # pose: the keypoint set (None: the model's first)
    focal: float | None = None  # pointmap: fx in the image's pixels
    files: tuple[str, ...] = ()  # whole-image tasks: the suffixes of the files to answer, as base64
    name: str | None = None  # the upload's file name, or the JSON's "name"


@dataclass(frozen=True)
class Served:
    """What the server runs, as a request sees it: per task its keypoint sets (pose; () for the others) and the
    suffixes of the files it writes (() for a task that writes none per image, pose)."""

    keypoints: Mapping[str, tuple[str, ...]]
    files: Mapping[str, tuple[str, ...]]
    takes_boxes: frozenset[str] = frozenset()
    takes_focal: frozenset[str] = frozenset()

    @property
    def tasks(self) -> list[str]:
        return list(self.keypoints)


def image_bytes(value: Any, limits: ServeLimits) -> tuple[bytes, str | None]:
    """The image's bytes and its file name (an upload's), from a form's upload or a JSON base64 string."""
    if hasattr(value, "read") or hasattr(value, "file"):  # an upload (starlette's UploadFile)
        stream = value.file if hasattr(value, "file") else value
        raw = stream.read(limits.max_bytes + 1)
        if len(raw) > limits.max_bytes:
            raise RequestError(413, f"image: more than {limits.max_bytes:,} bytes")
        filename = getattr(value, "filename", None)
        return raw, filename[:255] if isinstance(filename, str) else None
    if isinstance(value, (bytes, bytearray)):
        return bytes(value), None
    if not isinstance(value, str):
        raise RequestError(422, f"image: expected the image file's bytes in base64 (JSON) or an uploaded file "
                                f"(multipart field 'image'), got {type(value).__name__}")
    text = _DATA_URL.sub("", value.strip(), count=1)
    if len(text) > limits.max_bytes * 4 // 3 + 4:
        raise RequestError(413, f"image: more than {limits.max_bytes:,} bytes")
    try:
        return base64.b64decode(text, validate=True), None
    except (binascii.Error, ValueError):
        if _NOT_BASE64.match(text):  # only now: a JPEG's base64 starts with '/9j/'
            raise RequestError(422, f"image: the image file's bytes in base64, not a path or a URL "
                                    f"({text[:40]!r}): the server reads no file and fetches nothing") from None
        raise RequestError(422, "image: not base64 (the image file's bytes, standard alphabet, padded)") from None


def read_image(raw: bytes, limits: ServeLimits, what: str = "in the request") -> np.ndarray:
    """RGB uint8 of an image file's bytes, through the boundary: its header's size against ``limits.max_pixels``
    first (413), then decoded (422 when it is not an image, truncated or lies about its size)."""
    size = header_size(raw)
    if size is None:
        raise RequestError(422, f"image {what}: not an image the server reads (no PNG, JPEG, BMP, WebP or TIFF "
                                f"header)")
    if size[0] * size[1] > limits.max_pixels:
        raise RequestError(413, f"image {what}: {size[0]} x {size[1]} pixels, more than this server takes "
                                f"({limits.max_pixels:,}; serve --max_megapixels)")
    try:
        return decode_rgb(raw, what, limits.max_pixels)
    except DataError as err:
        raise RequestError(422, str(err)) from None


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def read_boxes(value: Any, limits: ServeLimits) -> np.ndarray | str:
    """``"whole_image"`` or an (N, 5) array of ``[x, y, w, h]`` / ``[x, y, w, h, score]`` rows (score 1 when left
    out); at most ``limits.max_boxes`` rows of finite numbers, w and h > 0, within the coordinate bound."""
    if value == WHOLE_IMAGE:
        return WHOLE_IMAGE
    if not isinstance(value, list):
        raise RequestError(422, f"boxes: a list of [x, y, w, h] or [x, y, w, h, score] boxes, or "
                                f"'{WHOLE_IMAGE}', got {type(value).__name__}")
    if len(value) > limits.max_boxes:
        raise RequestError(422, f"boxes: {len(value)} boxes, more than this server takes for one image "
                                f"({limits.max_boxes}; serve --max_boxes)")
    rows = []
    for k, box in enumerate(value):
        if not (isinstance(box, list) and len(box) in (4, 5) and all(_finite(v) for v in box)):
            raise RequestError(422, f"boxes[{k}]: [x, y, w, h] or [x, y, w, h, score] of finite numbers, got "
                                    f"{str(box)[:80]}")
        if box[2] <= 0 or box[3] <= 0 or max(abs(v) for v in box[:4]) > MAX_COORDINATE:
            raise RequestError(422, f"boxes[{k}]: w and h > 0 and values within +-{MAX_COORDINATE:g} pixels, got "
                                    f"{box}")
        rows.append([float(v) for v in box] + ([1.0] if len(box) == 4 else []))
    return np.asarray(rows, dtype=np.float64).reshape(-1, 5)


def _json_field(value: Any, field: str, form: bool) -> Any:
    """A form field holds JSON text (``boxes``, ``files``); a JSON body holds the value itself."""
    if not form or not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except ValueError:
        if field == "boxes" and value == WHOLE_IMAGE:
            return value
        raise RequestError(422, f"{field}: JSON text in a form field (e.g. [[10, 20, 100, 200]]), got "
                                f"{value[:80]!r}") from None


def _one(body: Mapping, field: str):
    """A field's one value (a form may repeat a field: refused)."""
    if hasattr(body, "getlist"):
        values = body.getlist(field)
        if len(values) > 1:
            raise RequestError(422, f"{field}: given {len(values)} times; one {field} per request")
    return body.get(field)


def parse_request(body: Any, served: Served, limits: ServeLimits) -> ServeRequest:
    """One request (a JSON object or a multipart form) read and checked against what is served and the limits;
    RequestError otherwise. The options are checked before the image is decoded."""
    if not isinstance(body, Mapping):
        raise RequestError(422, f"the body: a JSON object or a multipart form, got {type(body).__name__}")
    form = hasattr(body, "getlist")
    unknown = sorted(set(body) - set(FIELDS))
    if unknown:
        raise RequestError(422, f"unknown fields {unknown[:10]}; a request takes {', '.join(FIELDS)}")
    task = _one(body, "task")
    tasks = served.tasks
    if task is None:
        if len(tasks) > 1:
            raise RequestError(422, f"task: this server runs {', '.join(tasks)}: name one")
        task = tasks[0]
    if task not in tasks:
        raise RequestError(422, f"task: {str(task)[:40]!r} is not served; this server runs {', '.join(tasks)}")
    request = ServeRequest(np.zeros((0, 0, 3), np.uint8), task)

    boxes = _one(body, "boxes")
    if boxes is not None:
        if task not in served.takes_boxes:
            raise RequestError(422, f"boxes: person boxes are for pose models; {task} takes the whole image")
        request.boxes = read_boxes(_json_field(boxes, "boxes", form), limits)
    keypoints = _one(body, "keypoints")
    if keypoints is not None:
        sets = served.keypoints[task]
        if not sets:
            raise RequestError(422, f"keypoints: a keypoint set is for pose models; {task} has none")
        if keypoints not in sets:
            raise RequestError(422, f"keypoints: {str(keypoints)[:40]!r} is not served; this server runs {task} with "
                                    f"{', '.join(sets)} (serve --keypoints)")
        request.keypoints = keypoints
    focal = _one(body, "focal")
    if focal is not None:
        if task not in served.takes_focal:
            raise RequestError(422, f"focal: a known focal length is for pointmap models; {task} takes none")
        try:
            request.focal = float(focal)
        except (TypeError, ValueError):
            request.focal = math.nan
        if not (math.isfinite(request.focal) and request.focal > 0):
            raise RequestError(422, f"focal: the focal length fx in the image's pixels, > 0, got {str(focal)[:40]}")
    files = _one(body, "files")
    if files is not None:
        request.files = read_files(_json_field(files, "files", form), task, served)
    name = _one(body, "name")
    if name is not None and not isinstance(name, str):
        raise RequestError(422, f"name: a string (the image's name, answered as given), got {type(name).__name__}")

    if _one(body, "image") is None:
        raise RequestError(422, "image: missing (a JSON body's base64 'image', or a form's file field 'image')")
    raw, filename = image_bytes(_one(body, "image"), limits)
    request.name = name[:255] if isinstance(name, str) else filename
    request.image = read_image(raw, limits, request.name or "in the request")
    return request


def read_files(value: Any, task: str, served: Served) -> tuple[str, ...]:
    """The file suffixes asked for: ``true`` (all the task writes), ``false`` / ``[]`` (none) or a list of them."""
    known = served.files[task]
    if not known:
        raise RequestError(422, f"files: {task} writes no file per image; its answer is its findings")
    if value is True:
        return known
    if value is False:
        return ()
    if not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
        raise RequestError(422, f"files: true, false, or a list of the suffixes {list(known)}")
    missing = [v for v in value if v not in known]
    if missing:
        raise RequestError(422, f"files: {task} writes no {missing[:5]}; its files: {list(known)}")
    return tuple(dict.fromkeys(value))
