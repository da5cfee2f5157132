"""``sapiens2-ft serve`` as a user runs it: the command in its own process, asked over HTTP by a plain ``requests``
client that shares no code with the server. Good requests (a multipart upload, base64 JSON, batched under concurrent
clients) answer what ``predict`` writes for the same image and boxes; every bad one (bombs of every decoder,
truncated, not an image, too many boxes or bytes, a body that is not JSON) is a 4xx with a message, and the server
stays up and answers the next one the same; a full server answers 503 at once; SIGTERM stops every process it
started."""

from __future__ import annotations

import base64
import json
import os
import signal
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import cv2
import numpy as np
import pytest
import requests
from bombs import BOMBS

pytestmark = pytest.mark.slow  # the server's start (its workers load the models: ~15-30 s on 2 cores)

REPO = Path(__file__).resolve().parents[2]
BOXES = [[20, 10, 90, 200], [100, 30, 80, 190, 0.9]]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def people_photo(path: Path) -> bytes:
    image = np.full((240, 200, 3), 40, np.uint8)
    for x in (60, 140):
        cv2.line(image, (x, 50), (x, 150), (90, 200, 220), 6)
        cv2.circle(image, (x, 35), 14, (90, 200, 220), -1)
        cv2.line(image, (x, 150), (x - 20, 230), (90, 200, 220), 6)
        cv2.line(image, (x, 150), (x + 20, 230), (90, 200, 220), 6)
    cv2.imwrite(str(path), image)
    return path.read_bytes()


@pytest.fixture(scope="module")
def server(tiny_pose308_dir, seg_checkpoint, tmp_path_factory):
    """The command in a subprocess (its own process group): a 308-keypoint pose model served as COCO-17 and a seg
    checkpoint (exported at the start); (url, process, args)."""
    port = free_port()
    args = ["--model", str(tiny_pose308_dir), "--model", str(seg_checkpoint), "--keypoints", "coco17",
            "--port", str(port), "--accelerator", "cpu", "--max_batch_size", "4", "--batch_timeout", "0.05",
            "--max_megapixels", "1", "--max_boxes", "5", "--max_request_mb", "1", "--max_queue", "6"]
    log = tmp_path_factory.mktemp("serve") / "serve.log"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen([sys.executable, "-m", "sapiens2_ft.serve", *args], cwd=tmp_path_factory.mktemp("cwd"),
                               stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True, env=env)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and process.poll() is None:
        try:
            if requests.get(f"{url}/health", timeout=2).status_code == 200:
                break
        except requests.ConnectionError:
            pass
        time.sleep(1)
    else:
        stop(process)
        pytest.fail(f"the server did not start:\n{log.read_text()[-3000:]}")
    yield url, process, args, log
    stop(process)


def stop(process: subprocess.Popen) -> None:
    """The server's whole process group, ended (kill after a minute): only what this test started."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def test_served_outputs_equal_predicts_and_bad_requests_leave_it_serving(server, tmp_path):
    url, process, args, log = server
    raw = people_photo(tmp_path / "people.png")
    # predict on the same image and boxes, the same models
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "people.png").write_bytes(raw)
    boxes = [{"file_name": "people.png", "bbox": b[:4], "score": b[4] if len(b) > 4 else 1.0} for b in BOXES]
    (tmp_path / "boxes.json").write_text(json.dumps(boxes))
    from sapiens2_ft import predict

    predict.main(["--model", args[1], "--input", str(tmp_path / "in"), "--out", str(tmp_path / "pose"),
                  "--keypoints", "coco17", "--boxes", str(tmp_path / "boxes.json"), "--device", "cpu"])
    predict.main(["--model", args[3], "--input", str(tmp_path / "in"), "--out", str(tmp_path / "seg"),
                  "--device", "cpu"])
    written = json.loads((tmp_path / "pose" / "keypoints.json").read_text())

    upload = requests.post(f"{url}/predict", files={"image": ("people.png", raw, "image/png")},
                           data={"task": "pose", "boxes": json.dumps(BOXES)}, timeout=60)
    as_json = requests.post(f"{url}/predict", json={"image": base64.b64encode(raw).decode(), "task": "pose",
                                                    "boxes": BOXES}, timeout=60)
    assert upload.status_code == as_json.status_code == 200, (upload.text, as_json.text)
    found = upload.json()
    assert {**as_json.json(), "name": "people.png"} == found
    assert (found["name"], found["width"], found["height"], found["task"]) == ("people.png", 200, 240, "pose")
    assert len(found["people"]) == len(written) == 2
    for person, theirs in zip(found["people"], written):
        ours = np.array(list(person["keypoints"].values()))  # [x, y, score] by name, in the set's order
        np.testing.assert_allclose(ours[:, :2].reshape(-1), np.array(theirs["keypoints"]).reshape(-1, 3)[:, :2]
                                   .reshape(-1), atol=0.0100001)  # both rounded to 0.01 px
        assert ours[:, 2].tolist() == np.array(theirs["keypoints"]).reshape(-1, 3)[:, 2].tolist()  # scores: equal
        assert person["bbox"] == pytest.approx(theirs["bbox"], abs=0.01)

    seg = requests.post(f"{url}/predict", files={"image": ("people.png", raw)}, data={"task": "seg", "files": "true"},
                        timeout=60).json()
    assert set(seg["files"]) == {".png", "_overlay.png"} and seg["class_areas"]
    for suffix, data in seg["files"].items():  # the bytes predict writes, byte for byte
        assert base64.b64decode(data) == (tmp_path / "seg" / f"people{suffix}").read_bytes(), suffix

    bad = [("bomb " + name, dict(files={"image": (name, make())}, data={"task": "pose"}), 413, "pixels, more than")
           for name, make in BOMBS.items()]
    bad += [("truncated", dict(files={"image": ("t.png", raw[: len(raw) // 2])}, data={"task": "pose"}), 422,
             "truncated"),
            ("not an image", dict(files={"image": ("a.txt", b"hello")}, data={"task": "pose"}), 422, "not an image"),
            ("a path", dict(json={"image": "/etc/passwd", "task": "pose"}), 422, "not a path or a URL"),
            ("boxes", dict(json={"image": base64.b64encode(raw).decode(), "task": "pose", "boxes": BOXES * 3}), 422,
             "6 boxes"),
            ("bytes", dict(files={"image": ("big.png", b"\x89PNG" + os.urandom(1 << 20))}), 413, "more than"),
            ("text", dict(data=b"hello", headers={"Content-Type": "text/plain"}), 415, "got text/plain"),
            ("json", dict(data=b'{"image": ', headers={"Content-Type": "application/json"}), 400, "not JSON"),
            ("task", dict(json={"image": base64.b64encode(raw).decode()}), 422, "name one")]
    for name, request, status, message in bad:
        answer = requests.post(f"{url}/predict", timeout=60, **request)
        assert answer.status_code == status and message in answer.json()["detail"], (name, answer.text)
    assert requests.get(f"{url}/health", timeout=5).text == "ok" and process.poll() is None
    again = requests.post(f"{url}/predict", files={"image": ("people.png", raw)},
                          data={"task": "pose", "boxes": json.dumps(BOXES)}, timeout=60)
    assert again.json() == found
    docs = requests.get(f"{url}/openapi.json", timeout=5).json()["paths"]["/predict"]["post"]
    assert set(docs["requestBody"]["content"]) == {"application/json", "multipart/form-data"}
    assert requests.get(f"{url}/docs", timeout=5).status_code == 200
    assert "Traceback" not in log.read_text()


def test_concurrent_clients_are_batched_and_a_full_server_answers_503_at_once(server, tmp_path):
    url, process, args, log = server
    raw = people_photo(tmp_path / "people.png")
    images = [cv2.imencode(".png", np.roll(cv2.imread(str(tmp_path / "people.png")), 7 * k, axis=1))[1].tobytes()
              for k in range(6)]

    def ask(k: int):
        start = time.perf_counter()
        answer = requests.post(f"{url}/predict", files={"image": (f"{k}.png", images[k % 6])},
                               data={"task": "pose", "boxes": json.dumps(BOXES)}, timeout=120)
        return answer.status_code, answer.json(), time.perf_counter() - start

    alone = [ask(k)[1] for k in range(6)]
    with ThreadPoolExecutor(6) as pool:  # at the bound: every one is served, in batches
        together = list(pool.map(ask, range(6)))
    assert [status for status, _, _ in together] == [200] * 6
    for (_, answer, _), single in zip(together, alone):
        for person, other in zip(answer["people"], single["people"]):  # to one rounding step (tests/apps/
            for (x, y, s), (u, v, t) in zip(person["keypoints"].values(), other["keypoints"].values()):  # serve_models)
                assert abs(x - u) <= 0.0100001 and abs(y - v) <= 0.0100001 and abs(s - t) <= 0.0001001
    with ThreadPoolExecutor(24) as pool:  # four times the bound
        burst = list(pool.map(ask, range(48)))
    statuses = [status for status, _, _ in burst]
    assert set(statuses) <= {200, 503} and statuses.count(503) >= 10 and statuses.count(200) >= 6, statuses
    assert max(seconds for status, _, seconds in burst if status == 503) < 2.0  # at once, not after a timeout
    assert all("serve --max_queue" in answer["detail"] for status, answer, _ in burst if status == 503)
    assert requests.get(f"{url}/health", timeout=5).text == "ok" and process.poll() is None
    assert raw


def test_sigterm_stops_the_server_and_every_process_it_started(server):
    url, process, args, log = server
    process.send_signal(signal.SIGTERM)
    assert process.wait(90) == 0 or process.returncode in (-signal.SIGTERM, 1), log.read_text()[-2000:]
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            os.killpg(process.pid, 0)  # anything of its group left?
        except ProcessLookupError:
            break
        time.sleep(0.5)
    else:
        left = subprocess.run(["ps", "-o", "pid,cmd", "-g", str(process.pid)], capture_output=True, text=True).stdout
        pytest.fail(f"processes of the server outlived it:\n{left}")
    with pytest.raises(requests.ConnectionError):
        requests.get(f"{url}/health", timeout=5)
