"""The server on LitServe: :class:`SapiensAPI` declares what one request is (``decode_request``), what a batch of
them gives (``predict``) and what is answered (``encode_response``); LitServe does the rest: the HTTP server, the
queue to the workers, dynamic batching (``max_batch_size``, ``batch_timeout``), workers per device, the byte limit,
the time a request may wait (``timeout``: 504), ``/health``, ``/info`` and the OpenAPI page (``/docs``).

Two things LitServe lacks are :class:`RequestGate`'s, an ASGI middleware in front of ``POST /predict``: a bound on the
requests the server holds at once (one more is answered 503 at once, before its body is read, not after a timeout)
and the body's checks that LitServe would answer with a 500 (a body that is not JSON or a form: 415; JSON that does
not parse: 400). Bad requests never fail a batch: ``decode_request`` returns a refusal instead of raising, and it is
answered as such (``{"detail": ...}`` with its 4xx status) while the others of its batch are served.
"""

from __future__ import annotations

import json
import multiprocessing
import os
from dataclasses import dataclass

import litserve as ls
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from datamodules.errors import Sapiens2FTError
from sapiens2_ft.serve.models import ModelOptions, ServedModels
from sapiens2_ft.serve.requests import FIELDS, RequestError, ServeLimits, parse_request

PATH = "/predict"
FORMS = ("application/json", "multipart/form-data")


class SapiensAPI(ls.LitAPI):
    """The models of ``options`` behind ``POST /predict`` (one image and its options per request)."""

    def __init__(self, options: ModelOptions, limits: ServeLimits, max_batch_size: int = 1,
                 batch_timeout: float = 0.0):
        super().__init__(max_batch_size=max_batch_size, batch_timeout=batch_timeout)  # at PATH, the default
        self.options, self.limits = options, limits
        self.models: ServedModels | None = None

    def setup(self, device):
        try:
            self.models = ServedModels.load(self.options, str(device))
        except Sapiens2FTError as err:  # the loading's refusal: a worker must fail as an Exception LitServe sees
            raise RuntimeError(f"serve: {err}") from None
        served = self.models.served
        print(f"serve: worker on {device}: {', '.join(served.tasks)}"
              + (f"; pose boxes by default: {self.models.box_words}" if served.takes_boxes else ""), flush=True)

    def decode_request(self, request, **kwargs):
        """A ``ServeRequest``, or the ``RequestError`` that refuses it (returned: raising would fail the batch)."""
        try:
            return parse_request(request, self.models.served, self.limits)
        except RequestError as err:
            return err

    def predict(self, x, **kwargs):
        return self.models.run(x) if self.max_batch_size > 1 else self.models.run([x])[0]

    def encode_response(self, output, **kwargs):
        if isinstance(output, RequestError):
            return JSONResponse({"detail": output.message}, status_code=output.status)
        return output


def respond(status: int, message: str, headers: dict | None = None):
    """An ASGI app answering ``{"detail": message}`` with ``status``."""
    return JSONResponse({"detail": message}, status_code=status, headers=headers)


class RequestGate:
    """ASGI middleware of ``POST /predict``: at most ``max_queue`` requests held at once (``held``: a counter shared
    by the API server processes, which LitServe forks), a body of JSON or a form of at most ``max_bytes``, JSON
    that parses to an object. Anything else passes untouched."""

    def __init__(self, app, max_bytes: int, max_queue: int, held, path: str = PATH):
        self.app, self.max_bytes, self.max_queue, self.held, self.path = app, max_bytes, max_queue, held, path

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["path"] != self.path or scope["method"] != "POST":
            return await self.app(scope, receive, send)
        with self.held.get_lock():
            full = self.held.value >= self.max_queue
            if not full:
                self.held.value += 1
        if full:
            return await respond(503, f"the server is busy: it holds {self.max_queue} requests already (serve "
                                      f"--max_queue); retry later", {"Retry-After": "1"})(scope, receive, send)
        try:
            refusal, body = await self.read(scope, receive)
            if refusal is not None:
                return await refusal(scope, receive, send)
            sent = False

            async def replay():
                nonlocal sent
                if sent:
                    return await receive()
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}

            await self.app(scope, replay, send)
        finally:
            with self.held.get_lock():
                self.held.value -= 1

    async def read(self, scope, receive):
        """(a refusal or None, the body)."""
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        kind = headers.get("content-type", "").split(";")[0].strip().lower()
        if kind not in FORMS:
            return respond(415, f"the body: JSON (application/json) or a form (multipart/form-data), got "
                                f"{kind[:60] or 'no content type'}"), b""
        too_large = respond(413, f"the body: more than {self.max_bytes:,} bytes (serve --max_request_mb)")
        declared = headers.get("content-length", "")
        if declared.isdigit() and int(declared) > self.max_bytes:
            return too_large, b""
        chunks, size, more = [], 0, True
        while more:
            try:
                message = await receive()
            except HTTPException:  # LitServe's own byte limit, counting the same bytes
                return too_large, b""
            if message["type"] == "http.disconnect":
                return respond(400, "the client left before sending the body"), b""
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                return too_large, b""
            chunks.append(chunk)
            more = message.get("more_body", False)
        body = b"".join(chunks)
        if kind == "application/json":
            try:
                parsed = json.loads(body)
            except (ValueError, RecursionError) as err:
                return respond(400, f"the body is not JSON ({str(err)[:80]})"), b""
            if not isinstance(parsed, dict):
                return respond(422, f"the body: a JSON object of {', '.join(FIELDS)}, got "
                                    f"{type(parsed).__name__}"), b""
        return None, body


@dataclass(frozen=True)
class ServerOptions:
    """How the server runs its workers and what it holds."""

    accelerator: str = "auto"
    devices: int | str = "auto"
    workers_per_device: int = 1
    max_batch_size: int = 4
    batch_timeout: float = 0.01
    timeout: float = 30.0
    max_queue: int = 64


REQUEST_SCHEMA = {
    "type": "object",
    "required": ["image"],
    "properties": {
        "image": {"type": "string", "description": "the image file's bytes (PNG, JPEG, BMP, WebP, TIFF) in base64; "
                                                   "never a path or a URL"},
        "task": {"type": "string", "description": "the model to run (needed when the server runs several)"},
        "boxes": {"description": "pose: person boxes [[x, y, w, h(, score)], ...] in image pixels, or "
                                 "'whole_image'; default: the server's box source",
                  "oneOf": [{"type": "array", "items": {"type": "array", "items": {"type": "number"}}},
                            {"type": "string", "enum": ["whole_image"]}]},
        "keypoints": {"type": "string", "description": "pose: the keypoint set (one the server was started with)"},
        "focal": {"type": "number", "description": "pointmap: the camera's fx in the image's pixels"},
        "files": {"description": "whole-image tasks: true, or the suffixes of the files predict writes, answered "
                                 "in base64", "oneOf": [{"type": "boolean"}, {"type": "array",
                                                                              "items": {"type": "string"}}]},
        "name": {"type": "string", "description": "the image's name, answered as given"},
    },
}
FORM_SCHEMA = {"type": "object", "required": ["image"], "properties": {
    **REQUEST_SCHEMA["properties"], "image": {"type": "string", "format": "binary", "description": "the image file"},
    "boxes": {"type": "string", "description": "JSON text, as in the JSON body"},
    "files": {"type": "string", "description": "JSON text, as in the JSON body"}}}
RESPONSES = {
    "200": {"description": "the image's result: name, width, height, task and what the model found (pose: people "
                           "with bbox, score and keypoints by name as [x, y, score]; seg: class_areas; ...), files "
                           "when asked"},
    "400": {"description": "the body does not parse"}, "413": {"description": "too many bytes or pixels"},
    "415": {"description": "neither JSON nor a multipart form"},
    "422": {"description": "a field cannot be used (the message names it): not an image, truncated, too many "
                           "boxes, an unknown task or field"},
    "503": {"description": "the server holds --max_queue requests already: retry later"},
    "504": {"description": "the request waited longer than --timeout"},
}


def document(server) -> None:
    """``POST /predict``'s request and answers on the OpenAPI page (``/docs``; LitServe registers the route
    without a body schema)."""
    for route in server.app.routes:
        if getattr(route, "path", None) == PATH:
            route.summary = "Predict one image"
            route.description = "One image and its options, as JSON (the image in base64) or as a multipart form."
            route.openapi_extra = {"requestBody": {"required": True, "content": {
                "application/json": {"schema": REQUEST_SCHEMA}, "multipart/form-data": {"schema": FORM_SCHEMA}}}}
            route.responses = {**route.responses, **RESPONSES}


def build_server(options: ModelOptions, limits: ServeLimits, server: ServerOptions) -> ls.LitServer:
    """The LitServer of the models and limits (not started: ``.run(host, port)``)."""
    api = SapiensAPI(options, limits, server.max_batch_size, server.batch_timeout)
    held = multiprocessing.Value("i", 0)
    lit = ls.LitServer(api, accelerator=server.accelerator, devices=server.devices,
                       workers_per_device=server.workers_per_device, timeout=server.timeout,
                       max_payload_size=limits.max_bytes,
                       middlewares=[(RequestGate, {"max_bytes": limits.max_bytes, "max_queue": server.max_queue,
                                                   "held": held})])
    document(lit)
    return lit


def cpu_threads(workers: int) -> int:
    """Torch threads of each of ``workers`` CPU workers: the cores shared out (at least 1)."""
    return max(1, (os.cpu_count() or 1) // max(1, workers))
