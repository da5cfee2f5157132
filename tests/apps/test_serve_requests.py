"""``sapiens2-ft serve``'s requests without a server: what a ``POST /predict`` body may hold (``serve/requests.py``)
and the gate in front of LitServe (``serve/server.py``'s ``RequestGate``), each hostile case with its status and
message: bombs of every decoder refused from their header before any decoding, truncated files, not an image, a path
or a URL where the image goes, too many boxes, too many bytes, a full server answered 503 before its body is read."""

from __future__ import annotations

import base64
import io
import json
import multiprocessing

import cv2
import numpy as np
import pytest
from bombs import BOMBS
from starlette.datastructures import FormData, UploadFile
from starlette.responses import JSONResponse
from starlette.testclient import TestClient

from sapiens2_ft.serve.requests import RequestError, Served, ServeLimits, parse_request, read_image
from sapiens2_ft.serve.server import RequestGate

SERVED = Served({"pose": ("coco17", "sapiens2_308"), "seg": ()}, {"pose": (), "seg": (".png", "_overlay.png")},
                frozenset({"pose"}))
LIMITS = ServeLimits(max_bytes=1 << 20, max_pixels=10**6, max_boxes=3)


def png(height=64, width=48, seed=0) -> bytes:
    image = np.random.default_rng(seed).integers(0, 255, (height, width, 3), dtype=np.uint8)
    return cv2.imencode(".png", image)[1].tobytes()


def jpeg(height=64, width=48) -> bytes:
    return cv2.imencode(".jpg", np.full((height, width, 3), 120, np.uint8))[1].tobytes()


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def refused(body, status: int, match: str, served=SERVED, limits=LIMITS):
    with pytest.raises(RequestError, match=match) as caught:
        parse_request(body, served, limits)
    assert caught.value.status == status, caught.value.message
    return caught.value


def test_a_json_request_and_a_form_request_read_the_same_image_and_options():
    raw = png()
    as_json = parse_request({"image": b64(raw), "task": "pose", "boxes": [[1, 2, 30, 40], [0, 0, 10, 10, 0.5]],
                             "keypoints": "coco17", "name": "a.png"}, SERVED, LIMITS)
    upload = UploadFile(io.BytesIO(raw), filename="a.png")
    as_form = parse_request(FormData([("image", upload), ("task", "pose"), ("keypoints", "coco17"),
                                      ("boxes", "[[1, 2, 30, 40], [0, 0, 10, 10, 0.5]]")]), SERVED, LIMITS)
    expected = cv2.cvtColor(cv2.imdecode(np.frombuffer(raw, np.uint8), cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB)
    for request in (as_json, as_form):
        assert np.array_equal(request.image, expected) and request.name == "a.png" and request.keypoints == "coco17"
        assert request.boxes.tolist() == [[1, 2, 30, 40, 1], [0, 0, 10, 10, 0.5]]  # score 1 when left out
    data_url = parse_request({"image": "data:image/png;base64," + b64(raw), "boxes": "whole_image",
                              "task": "pose"}, SERVED, LIMITS)
    assert np.array_equal(data_url.image, expected) and data_url.boxes == "whole_image" and data_url.name is None
    seg = parse_request({"image": b64(raw), "task": "seg", "files": True}, SERVED, LIMITS)
    assert seg.files == (".png", "_overlay.png") and seg.boxes is None
    assert parse_request({"image": b64(raw), "task": "seg", "files": ["_overlay.png"]}, SERVED, LIMITS).files == (
        "_overlay.png",)


def test_bombs_of_every_decoder_are_refused_from_their_header_before_decoding(decoded):
    for name, make in BOMBS.items():
        raw = make()
        error = refused({"image": b64(raw), "task": "pose"}, 413, r"\d+ x \d+ pixels, more than this server takes")
        assert "serve --max_megapixels" in error.message
        form = FormData([("image", UploadFile(io.BytesIO(raw), filename=name)), ("task", "pose")])
        refused(form, 413, rf"image {name}: \d+ x \d+ pixels")
    assert decoded == []  # nothing was decoded, not even the small real pictures behind the lying headers


@pytest.mark.parametrize("case", ["truncated jpeg", "truncated png", "text", "empty", "header only"])
def test_files_that_are_not_whole_images_are_refused_with_a_message(case, decoded):
    raw = {"truncated jpeg": jpeg()[:300], "truncated png": png()[:200], "text": b"hello, not a picture",
           "empty": b"", "header only": png()[:33]}[case]
    refused({"image": b64(raw), "task": "pose"}, 422, r"image in the request: (not an image|.*truncated)")
    refused(FormData([("image", UploadFile(io.BytesIO(raw), filename="x.jpg")), ("task", "pose")]), 422,
            r"image x.jpg: (not an image|.*truncated)")


def test_a_path_or_a_url_is_not_read_nor_fetched():
    for where in ("/etc/passwd", "~/photo.jpg", "../secrets.png", "file:///etc/passwd", "https://example.com/a.jpg",
                  "s3://bucket/a.png", "pipe:cat /etc/passwd", "C:\\photos\\a.jpg"):
        refused({"image": where, "task": "pose"}, 422, "not a path or a URL")
    refused({"image": "not base64 at all!", "task": "pose"}, 422, "not base64")
    refused({"image": "/etc/passwd1", "task": "pose"}, 422, "not an image")  # valid base64, 9 bytes of nonsense
    refused({"image": 12, "task": "pose"}, 422, "got int")


def test_too_many_bytes_boxes_and_fields_are_refused():
    big = png(600, 600)  # 1 MB of noise as PNG: above max_bytes, under the pixel limit
    assert len(big) > LIMITS.max_bytes and 600 * 600 <= LIMITS.max_pixels
    refused({"image": b64(big), "task": "pose"}, 413, "image: more than 1,048,576 bytes")
    refused(FormData([("image", UploadFile(io.BytesIO(big))), ("task", "pose")]), 413, "more than 1,048,576 bytes")
    raw = b64(png())
    refused({"image": raw, "task": "pose", "boxes": [[0, 0, 5, 5]] * 4}, 422, r"4 boxes, more than .* \(3; serve "
                                                                             r"--max_boxes\)")
    for boxes, match in [([[0, 0, 5]], r"boxes\[0\]"), ([[0, 0, -5, 5]], "w and h > 0"),
                         ([[0, 0, 5, float("nan")]], "finite"), ([[0, 0, 5, 5e9]], "within"), ({"x": 1}, "a list"),
                         ([[0, 0, 5, True]], "finite")]:
        refused({"image": raw, "task": "pose", "boxes": boxes}, 422, match)
    refused({"image": raw, "task": "pose", "box": []}, 422, r"unknown fields \['box'\]")
    refused(FormData([("image", UploadFile(io.BytesIO(png()))), ("image", UploadFile(io.BytesIO(png()))),
                      ("task", "pose")]), 422, "image: given 2 times")
    refused(FormData([("image", UploadFile(io.BytesIO(png()))), ("task", "pose"), ("boxes", "[[1, 2")]), 422,
            "boxes: JSON text")


def test_options_are_checked_against_what_is_served():
    raw = b64(png())
    refused({"image": raw}, 422, "task: this server runs pose, seg: name one")
    refused({"image": raw, "task": "normal"}, 422, "'normal' is not served")
    refused({"image": raw, "task": "pose", "keypoints": "coco_wholebody"}, 422, "runs pose with coco17, sapiens2_308")
    refused({"image": raw, "task": "seg", "boxes": [[0, 0, 5, 5]]}, 422, "person boxes are for pose models")
    refused({"image": raw, "task": "seg", "keypoints": "coco17"}, 422, "a keypoint set is for pose models")
    refused({"image": raw, "task": "seg", "focal": 500}, 422, "focal length is for pointmap models")
    refused({"image": raw, "task": "pose", "files": True}, 422, "pose writes no file per image")
    refused({"image": raw, "task": "seg", "files": [".npy"]}, 422, r"seg writes no \['.npy'\]")
    refused({"task": "pose"}, 422, "image: missing")
    refused({"image": raw, "task": "pose", "name": 3}, 422, "name: a string")
    pointmap = Served({"pointmap": ()}, {"pointmap": (".npy",)}, takes_focal=frozenset({"pointmap"}))
    assert parse_request({"image": raw, "focal": "512.5"}, pointmap, LIMITS).focal == 512.5
    for focal in (0, -3, "x", float("inf")):
        refused({"image": raw, "focal": focal}, 422, "focal: the focal length", served=pointmap)


def test_the_pixel_limit_is_the_servers_own():
    raw = png(100, 200)
    assert read_image(raw, ServeLimits(max_pixels=20_000)).shape == (100, 200, 3)
    with pytest.raises(RequestError, match=r"200 x 100 pixels, more than this server takes \(19,999"):
        read_image(raw, ServeLimits(max_pixels=19_999))


# -- the gate in front of LitServe -------------------------------------------------------------------------------


def gate(max_bytes=1000, max_queue=2, held=None):
    """A TestClient of ``RequestGate`` over an app that answers what it read; (client, calls, held)."""
    calls, held = [], held or multiprocessing.Value("i", 0)

    async def app(scope, receive, send):
        body, more = b"", True
        while more:
            message = await receive()
            body, more = body + message.get("body", b""), message.get("more_body", False)
        calls.append((scope["path"], len(body), held.value))
        await JSONResponse({"read": len(body)})(scope, receive, send)

    return TestClient(RequestGate(app, max_bytes, max_queue, held)), calls, held


def test_a_full_server_answers_503_at_once_without_reading_the_body():
    client, calls, held = gate(max_queue=2)
    body = json.dumps({"image": "x"}).encode()
    assert client.post("/predict", content=body, headers={"Content-Type": "application/json"}).json() == {"read": 14}
    assert calls == [("/predict", 14, 1)] and held.value == 0  # held while it ran, let go after
    held.value = 2  # two requests in the server already
    answer = client.post("/predict", json={"image": "x"})
    assert answer.status_code == 503 and "holds 2 requests already (serve --max_queue)" in answer.json()["detail"]
    assert answer.headers["retry-after"] == "1" and len(calls) == 1 and held.value == 2
    assert client.get("/health").status_code == 200 and client.post("/info", json={}).status_code == 200  # others pass
    held.value = 1
    assert client.post("/predict", json={"image": "x"}).status_code == 200 and held.value == 1


def test_the_gate_refuses_bodies_litserve_would_answer_with_a_500():
    client, calls, held = gate(max_bytes=1000)
    cases = [(dict(content=b"{bad", headers={"Content-Type": "application/json"}), 400, "not JSON"),
             (dict(content=b"[" * 100_000, headers={"Content-Type": "application/json"}), 413, "more than 1,000"),
             (dict(content=b"[" * 900, headers={"Content-Type": "application/json"}), 400, "not JSON"),
             (dict(json=[1, 2]), 422, "a JSON object"),
             (dict(content=b"hello", headers={"Content-Type": "text/plain"}), 415, "got text/plain"),
             (dict(content=b"hello"), 415, "no content type"),
             (dict(json={"image": "A" * 2000}), 413, "more than 1,000 bytes"),
             (dict(content=iter([b'{"image": "', b"A" * 1200, b'"}']), headers={"Content-Type": "application/json"}),
              413, "more than 1,000 bytes")]  # streamed, no Content-Length
    for request, status, message in cases:
        answer = client.post("/predict", **request)
        assert answer.status_code == status and message in answer.json()["detail"], (status, answer.text)
    assert calls == [] and held.value == 0
    form = client.post("/predict", files={"image": ("a.png", b"x" * 100)})
    assert form.status_code == 200 and calls[0][1] > 100  # a multipart body passes whole
