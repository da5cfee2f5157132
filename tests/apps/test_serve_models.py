"""What ``sapiens2-ft serve`` answers, without a server (``serve/models.py``, ``serve/server.py``'s LitAPI, in this
process): the JSON of what the Python API gives for the same image and boxes (pose, with each keypoint set served;
a whole-image task, with its files as predict writes them); a batch answers what each request alone answers, whatever
else is in it; a bad request, or one the model fails on, is answered alone; every option of the command reaches the
server it builds."""

from __future__ import annotations

import base64

import cv2
import numpy as np
import pytest
from conftest import tiny_pose_config

import sapiens2_ft
from datamodules.errors import Sapiens2FTError
from sapiens2_ft.predict.result_json import result_json
from sapiens2_ft.serve import cli
from sapiens2_ft.serve.models import ModelOptions, ServedModels
from sapiens2_ft.serve.requests import RequestError, ServeLimits, parse_request
from sapiens2_ft.serve.server import RequestGate, SapiensAPI, build_server

LIMITS = ServeLimits()


@pytest.fixture(scope="module")
def tiny_seg_dir(tmp_path_factory):
    """A 29-class seg model saved with save_pretrained (random, tiny)."""
    import torch
    from transformers import Sapiens2ForSemanticSegmentation

    out = tmp_path_factory.mktemp("seg")
    with torch.random.fork_rng():
        torch.manual_seed(1)
        seg = Sapiens2ForSemanticSegmentation(tiny_pose_config(29))
    seg.config.architectures = [type(seg).__name__]
    seg.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def served(tiny_pose308_dir, tiny_seg_dir):
    """A worker's models: the tiny 308-keypoint pose model served as COCO-17 and as itself, and the seg model."""
    return ServedModels.load(ModelOptions([str(tiny_pose308_dir), str(tiny_seg_dir)], ["coco17", "sapiens2_308"]),
                             "cpu")


def photo(seed: int, size=(180, 140)) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 255, (*size, 3), dtype=np.uint8)


def body(image: np.ndarray, **options) -> dict:
    raw = cv2.imencode(".png", image[..., ::-1])[1].tobytes()
    return {"image": base64.b64encode(raw).decode(), **options}


def ask(served, *bodies) -> list:
    """The answers of one batch of request bodies."""
    items = []
    for b in bodies:
        try:
            items.append(parse_request(b, served.served, LIMITS))
        except RequestError as err:
            items.append(err)
    return served.run(items)


BOXES = [[10, 20, 80, 120], [40, 5, 60, 150, 0.8]]


def test_the_answer_is_the_json_of_the_python_api_s_result(served, tiny_pose308_dir, tiny_seg_dir):
    image = photo(0)
    for keypoints in ("coco17", "sapiens2_308"):
        predictor = sapiens2_ft.load(tiny_pose308_dir, device="cpu", keypoints=keypoints)
        [result] = predictor.predict([image], boxes=[np.array([[10, 20, 80, 120, 1], [40, 5, 60, 150, 0.8]])])
        [answer] = ask(served, body(image, task="pose", boxes=BOXES, keypoints=keypoints))
        assert answer == result_json(result)
        assert len(answer["people"]) == 2 and len(answer["people"][0]["keypoints"]) == len(predictor.labels)
    [default] = ask(served, body(image, task="pose", boxes=BOXES))  # the first --keypoints
    assert list(default["people"][0]["keypoints"]) == sapiens2_ft.load(tiny_pose308_dir, keypoints="coco17").labels
    whole = sapiens2_ft.load(tiny_pose308_dir, device="cpu", keypoints="coco17")
    [answer] = ask(served, body(image, task="pose", boxes="whole_image"))
    assert answer == result_json(whole.predict([image], boxes="whole_image")[0])

    seg = sapiens2_ft.load(tiny_seg_dir, device="cpu")
    [result] = seg.predict([image])
    [answer] = ask(served, body(image, task="seg", files=True, name="a.png"))
    assert answer == result_json(result, [".png", "_overlay.png"], name="a.png")
    assert answer["class_areas"] and set(answer["files"]) == {".png", "_overlay.png"}
    labels = cv2.imdecode(np.frombuffer(base64.b64decode(answer["files"][".png"]), np.uint8), cv2.IMREAD_UNCHANGED)
    assert np.array_equal(labels, result.files[".png"])  # predict's class ids, losslessly


def close(a, b, step: float = 0.01) -> bool:
    """The same JSON to one rounding step of its numbers (points are given to 0.01 px, scores to 0.0001): a batch
    sums its forward pass in another order (raw points measured 1.8e-5 px apart), which may move a rounding."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(close(a[k], b[k], step) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(close(x, y, step) for x, y in zip(a, b))
    if isinstance(a, float) and isinstance(b, float):
        return abs(a - b) <= step + 1e-9
    return type(a) is type(b) and a == b


def test_a_batch_answers_what_each_request_alone_answers(served):
    bodies = [body(photo(1), task="pose", boxes=BOXES), body(photo(2), task="seg", files=[".png"]),
              body(photo(3, (200, 90)), task="pose", boxes=BOXES[:1], keypoints="sapiens2_308"),
              {"image": "/etc/passwd", "task": "pose"},
              body(photo(4), task="pose", boxes="whole_image"), body(photo(5), task="pose", boxes=[]),
              body(photo(6, (64, 300)), task="pose", boxes=BOXES[1:], keypoints="coco17")]
    together = ask(served, *bodies)
    alone = [ask(served, b)[0] for b in bodies]
    assert [close(a, b) for a, b in zip(together, alone)] == [True, True, True, False, True, True, True]
    assert isinstance(together[3], RequestError) and together[3].status == 422 and together[3] is not alone[3]
    assert [len(a["people"]) for a in together if isinstance(a, dict) and "people" in a] == [2, 1, 1, 0, 1]
    assert len(together[2]["people"][0]["keypoints"]) == 308 and len(together[6]["people"][0]["keypoints"]) == 17
    reordered = ask(served, *bodies[::-1])[::-1]  # the order of a batch changes nothing
    assert [close(a, b) for a, b in zip(reordered, alone)] == [True, True, True, False, True, True, True]


def test_a_request_the_model_fails_on_is_answered_alone(served, monkeypatch):
    bodies = [body(photo(k), task="pose", boxes=BOXES) for k in range(3)]
    expected = ask(served, *bodies)
    real = ServedModels.results
    poisoned = photo(1)

    def results(self, requests):
        if any(np.array_equal(r.image, poisoned) for r in requests):
            raise RuntimeError("out of memory")
        return real(self, requests)

    monkeypatch.setattr(ServedModels, "results", results)
    answers = ask(served, *bodies)
    assert close(answers[0], expected[0]) and close(answers[2], expected[2])
    assert isinstance(answers[1], RequestError) and answers[1].status == 500


def test_the_lit_api_answers_a_refusal_with_its_status_and_message(served):
    api = SapiensAPI(ModelOptions([]), LIMITS, max_batch_size=4)
    api.models = served  # as setup leaves it
    good, bad = body(photo(0), task="pose", boxes=BOXES), body(photo(0), task="pose", boxes=[[0, 0, 1, 1]] * 101)
    answers = [api.encode_response(y) for y in api.predict([api.decode_request(good), api.decode_request(bad)])]
    assert answers[0] == ask(served, good)[0]
    assert answers[1].status_code == 422 and b"101 boxes, more than this server takes" in answers[1].body
    single = SapiensAPI(ModelOptions([]), LIMITS, max_batch_size=1)
    single.models = served
    assert single.encode_response(single.predict(single.decode_request(good))) == answers[0]


def test_the_default_boxes_are_the_servers_source(tiny_pose308_dir, tiny_seg_dir, served):
    """No boxes in the request: a seg model among --model finds the people (as the web demo does); alone, the whole
    image is one person."""
    image = photo(7)
    [from_seg] = ask(served, body(image, task="pose"))
    seg = served.inferences["seg"][None]
    from sapiens2_ft.predict.boxes import PeopleBoxes

    boxes = PeopleBoxes(seg, 0.001, 0.05)(["0"], [image])
    assert [p["bbox"] for p in from_seg["people"]] == [[round(float(v), 2) for v in b[:4]] for b in boxes[0]]
    alone = ServedModels.load(ModelOptions([str(tiny_pose308_dir)]), "cpu")
    [whole] = ask(alone, body(image))  # one model: no task needed
    assert [p["bbox"] for p in whole["people"]] == [[0.0, 0.0, 140.0, 180.0]]
    assert alone.served.keypoints == {"pose": ("sapiens2_308",)}  # the model's own set


def test_every_serve_option_reaches_the_server_it_builds(tiny_pose308_dir, tmp_path, monkeypatch):
    args = cli.parser().parse_args([
        "--model", str(tiny_pose308_dir), "--keypoints", "coco17", "--keypoints", "sapiens2_308",
        "--backend", "torch", "--precision", "fp32", "--host", "127.0.0.1", "--port", "8123",
        "--accelerator", "cpu", "--devices", "1", "--workers_per_device", "2", "--max_batch_size", "6",
        "--batch_timeout", "0.05", "--batch_size", "3", "--timeout", "7", "--max_queue", "9",
        "--max_request_mb", "2.5", "--max_megapixels", "1.5", "--max_boxes", "11",
        "--boxes_from_seg", str(tiny_pose308_dir), "--seg_min_area", "0.01", "--seg_box_pad", "0.1",
        "--no-seg_split_heads", "--seg_head_area", "0.003", "--det_threshold", "0.4", "--nms_iou", "0.5"])
    models, limits, options = cli.options_of(args, tmp_path)
    assert models.models == [str(tiny_pose308_dir)] and models.keypoints == ["coco17", "sapiens2_308"]
    assert (models.backend, models.precision, models.batch_size, models.threads) == ("torch", "fp32", 3, 1)
    assert models.boxes == {"detector": None, "det_threshold": 0.4, "nms_iou": 0.5, "boxes_from_seg":
                            str(tiny_pose308_dir), "seg_min_area": 0.01, "seg_box_pad": 0.1, "seg_split_heads": False,
                            "seg_head_area": 0.003}
    assert limits == ServeLimits(int(2.5 * 2**20), 1_500_000, 11)
    server = build_server(models, limits, options)
    api = server.lit_api
    assert (api.max_batch_size, api.batch_timeout, server.timeout, server.workers_per_device) == (6, 0.05, 7, 2)
    assert server.max_payload_size == int(2.5 * 2**20) and server.devices == ["cpu"]
    gate = next(kwargs for middleware, kwargs in server.middlewares if middleware is RequestGate)
    assert (gate["max_bytes"], gate["max_queue"]) == (int(2.5 * 2**20), 9)
    schema = server.app.openapi()["paths"]["/predict"]["post"]
    assert set(schema["requestBody"]["content"]) == {"application/json", "multipart/form-data"}
    assert {"413", "415", "422", "503", "504"} <= set(schema["responses"])
    ran = []
    monkeypatch.setattr(type(server), "run", lambda self, **kw: ran.append(kw))
    import sapiens2_ft.serve.server as server_module

    monkeypatch.setattr(server_module, "build_server", lambda *a: server)
    assert cli.main(["--model", str(tiny_pose308_dir), "--port", "8123", "--host", "0.0.0.0"]) == 0
    assert ran == [{"host": "0.0.0.0", "port": 8123, "generate_client_file": False}]


def test_bad_arguments_are_one_message_before_anything_loads(tmp_path):
    args = cli.parser().parse_args(["--model", str(tmp_path / "missing"), "--port", "80", "--max_batch_size", "0",
                                    "--batch_timeout", "40", "--max_megapixels", "0", "--devices", "two",
                                    "--detector", "d", "--boxes_from_seg", "s", "--max_queue", "0"])
    problems = "\n".join(cli.argument_problems(args))
    for part in ("missing' does not exist", "--port: 1024 to 65535", "--max_batch_size: at least 1",
                 "--batch_timeout: from 0 to below --timeout", "--max_megapixels: must be > 0", "--devices: a count",
                 "one of --detector and --boxes_from_seg", "--max_queue: at least 1"):
        assert part in problems, part
    (tmp_path / "config.json").write_text("{}")  # an export without its ONNX graph
    with pytest.raises(Sapiens2FTError, match="has no model.onnx; add it with `sapiens2-ft export"):
        cli.prepared_model(str(tmp_path), tmp_path, "onnxruntime")


def test_a_model_the_server_cannot_serve_is_refused_before_the_workers_start(tiny_pretrain_dir, tiny_pose308_dir,
                                                                              tmp_path):
    with pytest.raises(Sapiens2FTError, match="--model: .* holds a Sapiens2Model, not a Sapiens2 task model"):
        cli.options_of(cli.parser().parse_args(["--model", str(tiny_pretrain_dir)]), tmp_path)
    with pytest.raises(Sapiens2FTError, match="two pose models; give one model per task"):
        cli.options_of(cli.parser().parse_args(["--model", str(tiny_pose308_dir), "--model", str(tiny_pose308_dir)]),
                       tmp_path)
