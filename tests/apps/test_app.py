"""``sapiens2-ft app``: the web demo through its HTTP API (gradio_client), as a visitor's browser sees it (headless
Chromium driven by Playwright), and as the Space ``--write_space`` writes, started as Spaces start it."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import cv2
import numpy as np
import pytest

from bombs import write_bombs
from gradio_client import Client, handle_file
from gradio_client.exceptions import AppError

from datamodules.errors import BadInput, Refused
from sapiens2_ft import predict
from sapiens2_ft.app import cli

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def photo(tmp: Path, name: str = "people.jpg", size=(256, 192)) -> Path:
    image = np.zeros((*size, 3), np.uint8)
    for x in (50, 120):  # two stick figures
        cv2.line(image, (x, 40), (x, 160), (90, 200, 220), 6)
        cv2.circle(image, (x, 30), 14, (90, 200, 220), -1)
        cv2.line(image, (x, 160), (x - 20, 240), (90, 200, 220), 6)
        cv2.line(image, (x, 160), (x + 20, 240), (90, 200, 220), 6)
    cv2.imwrite(str(tmp / name), image)
    return tmp / name


@pytest.fixture(scope="module")
def served(pose_run, seg_checkpoint, tmp_path_factory):
    """The app on a pose export and a seg checkpoint, served in this process; (url, models loaded, args)."""
    loaded = []
    with pytest.MonkeyPatch.context() as patch:
        real = cli.load_inference
        patch.setattr(cli, "load_inference", lambda *a, **k: loaded.append(a[0]) or real(*a, **k))
        args = ["--model", pose_run[1]["export"], "--model", str(seg_checkpoint), "--port", str(free_port()),
                "--max_megapixels", "0.1", "--device", "cpu"]
        page = cli.start(cli.parser().parse_args(args), block=False)
    yield page.local_url, loaded, args
    page.close()


def test_photo_gives_predicts_pictures_and_what_was_found(served, tmp_path):
    url, loaded, args = served
    client = Client(url, verbose=False)
    image = photo(tmp_path)
    for _ in range(2):  # loads once, serves many
        gallery, found = client.predict(handle_file(str(image)), api_name="/photo")
    assert loaded == args[1:4:2]  # the two models, at start only
    people = found["pose"]["people"]
    assert [item["caption"] for item in gallery] == [f"pose ({len(people)} people)", "body parts", "sheet"]
    assert found["person_boxes"] == f"the people {args[3]} finds"  # the seg model given gives pose its boxes
    assert all(len(p["keypoints"]) == 17 and len(p["bbox"]) == 4 and p["score"] > 0 for p in people)
    assert all(set(p["keypoints"]) >= {"nose", "left_ankle"} for p in people)
    areas = found["seg"]["class_areas"]
    assert areas and sum(areas.values()) == pytest.approx(1, abs=1e-3)

    # What `predict` writes for these models on this image: the same sheet, the same people.
    out = tmp_path / "predict"
    predict.main(["--model", args[1], "--model", args[3], "--boxes_from_seg", args[3], "--input", str(image),
                  "--out", str(out), "--device", "cpu"])
    served_sheet = cv2.imread(gallery[2]["image"])  # PNG; predict writes JPEG: the same pixels give the same file
    assert cv2.imencode(".jpg", served_sheet)[1].tobytes() == (out / "sheets" / "people.jpg").read_bytes()
    keypoints = json.loads((out / "pose" / "keypoints.json").read_text())
    assert len(keypoints) == len(people)
    # The same code on the same pixels: equal to the bit before both round to 2 decimals (measured through the page
    # with 8 seg models: 14-46 people, largest difference 0.0), so one rounding step is all that may differ.
    for written_person, person in zip(keypoints, people):
        assert written_person["bbox"] == pytest.approx(person["bbox"], abs=0.01)
        xy = np.asarray(written_person["keypoints"]).reshape(-1, 3)[:, :2]
        assert xy == pytest.approx(np.asarray([v[:2] for v in person["keypoints"].values()]), abs=0.01)


def test_bad_input_is_a_message(served, tmp_path):
    client = Client(served[0], verbose=False)
    (tmp_path / "notes.txt").write_text("not a picture")
    with pytest.raises(AppError, match=r"notes.txt: not an image this demo can read"):
        client.predict(handle_file(str(tmp_path / "notes.txt")), api_name="/photo")
    big = photo(tmp_path, "big.png", size=(400, 300))
    with pytest.raises(AppError, match=r"big.png: 300 x 400 pixels \(0 megapixels\) is more than this demo takes"):
        client.predict(handle_file(str(big)), api_name="/photo")
    with pytest.raises(AppError, match="cannot be read as a video"):
        client.predict(handle_file(str(tmp_path / "notes.txt")), api_name="/video")


def test_a_bomb_upload_is_refused_from_its_header_and_the_queue_goes_on(served, tmp_path, monkeypatch):
    """Issue 58, case 6: every decoder's bomb (a 17 kB 1-bit PNG of 12000 x 12000 among them) is refused from its
    header before Gradio or the demo decodes it, and the next visitor's photo is served."""
    from PIL import Image

    decoded, real_load, real_decode = [], Image.Image.load, cv2.imdecode
    monkeypatch.setattr(Image.Image, "load", lambda self, *a: decoded.append(self.size) or real_load(self, *a))
    monkeypatch.setattr(cv2, "imdecode", lambda raw, flags: decoded.append("cv2") or real_decode(raw, flags))
    client = Client(served[0], verbose=False)
    for name in write_bombs(tmp_path / "bombs"):
        with pytest.raises(AppError, match=r"\d+ x \d+ pixels \(\d+ megapixels\) is more than this demo "):
            client.predict(handle_file(str(tmp_path / "bombs" / name)), api_name="/photo")
        assert not [size for size in decoded if size == "cv2" or size[0] * size[1] > 10**6], name
    gallery, found = client.predict(handle_file(str(photo(tmp_path))), api_name="/photo")
    assert found["image"] == {"width": 192, "height": 256} and gallery


def test_video_gives_predicts_video_and_per_frame_people(served, tmp_path):
    frame = cv2.imread(str(photo(tmp_path)))
    writer = cv2.VideoWriter(str(tmp_path / "clip.mp4"), cv2.VideoWriter_fourcc(*"mp4v"), 5, (192, 256))
    for k in range(3):
        writer.write(np.roll(frame, 4 * k, axis=1))
    writer.release()
    clip, frames = Client(served[0], verbose=False).predict(handle_file(str(tmp_path / "clip.mp4")), api_name="/video")
    assert [f["frame"] for f in frames["frames"]] == [0, 1, 2] and all("people" in f for f in frames["frames"])
    video = cv2.VideoCapture(clip)
    assert Path(clip).suffix == ".webm"  # VP8, which browsers play
    assert video.read()[0]
    video.release()


def test_limits_and_server_options_reach_the_demo_and_the_server(pose_run, tmp_path, monkeypatch):
    """``--max_frames`` cuts a video to its first frames (its JSON says so); ``--host``, ``--port`` and
    ``--max_upload_mb`` go to the server. The page is not served: what ``start`` hands it is looked at."""
    import sapiens2_ft.app.page as page

    handed = {}

    class Page:
        def launch(self, **options):
            handed["launch"] = options

    monkeypatch.setattr(page, "build_page", lambda demo, models, scratch: handed.update(demo=demo) or Page())
    cli.start(cli.parser().parse_args(["--model", pose_run[1]["export"], "--max_frames", "2", "--max_upload_mb", "3",
                                       "--host", "0.0.0.0", "--port", "7001", "--device", "cpu"]), block=False)
    assert {k: handed["launch"][k] for k in ("server_name", "server_port", "max_file_size")} == {
        "server_name": "0.0.0.0", "server_port": 7001, "max_file_size": "3mb"}
    frame = cv2.imread(str(photo(tmp_path)))
    writer = cv2.VideoWriter(str(tmp_path / "clip.mp4"), cv2.VideoWriter_fourcc(*"mp4v"), 5, (192, 256))
    for k in range(3):
        writer.write(np.roll(frame, 4 * k, axis=1))
    writer.release()
    _, found = handed["demo"].video(tmp_path / "clip.mp4", tmp_path / "out")
    assert [f["frame"] for f in found["frames"]] == [0, 1]
    assert found["note"] == "the first 2 frames only (this demo's limit)"


def test_a_model_of_an_unknown_task_is_refused_by_name(pose_run, tmp_path):
    model = shutil.copytree(pose_run[1]["export"], tmp_path / "model")
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "sapiens2_ft_task": "gait"}))
    with pytest.raises(SystemExit, match="a model of task 'gait', which this installation does not have"):
        cli.main(["--model", str(model), "--port", str(free_port())])


def test_space_keeps_the_options_and_refuses_local_files_it_cannot_hold(tiny_detector_dir, tmp_path):
    from sapiens2_ft.app.space import write_space

    hub_model = "facebook/sapiens2-pose-0.4b"
    argv = ["--model", hub_model, "--max_frames", "50", "--port", "9", "--write_space", str(tmp_path / "space")]
    space = write_space(tmp_path / "space", [hub_model], argv)
    app = (space / "app.py").read_text()
    assert repr([hub_model]) in app and repr(["--max_frames", "50"]) in app  # the port is the Space's
    assert not (space / "models").exists() and f"- {hub_model}" in (space / "README.md").read_text()
    assert (space / "LICENSE-sapiens2-ft").read_text().lstrip().startswith("Apache License")
    with pytest.raises(Refused, match="is not empty"):
        write_space(space, [hub_model], argv)
    with pytest.raises(BadInput, match=f"--detector {tiny_detector_dir} is a local file; a Space has only its folder"):
        write_space(tmp_path / "other", [hub_model], ["--detector", str(tiny_detector_dir)])


def browser_or_skip():
    """Debian's chromium; a skip where it is missing, except in CI (CI=true), where the browser test must run."""
    if not CHROMIUM.is_file():
        if os.environ.get("CI") == "true":
            pytest.fail(f"{CHROMIUM} is missing in CI: .ci/run installs it (apt-get install chromium)")
        pytest.skip(f"no {CHROMIUM} (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    return sync_playwright


@pytest.mark.slow
def test_written_space_starts_and_serves_a_browser(pose_run, tmp_path):
    sync_playwright = browser_or_skip()
    space = cli.main(["--write_space", str(tmp_path / "space"), "--model", pose_run[1]["export"],
                      "--max_megapixels", "0.1"])
    readme = (space / "README.md").read_text()
    assert "sdk: gradio" in readme and "app_file: app.py" in readme
    assert {"app.py", "requirements.txt", "sapiens2_ft", "datamodules"} <= {p.name for p in space.iterdir()}
    assert (space / "models" / "0" / "LICENSE-sapiens2.md").is_file()
    assert any(line.startswith("gradio==") for line in (space / "requirements.txt").read_text().splitlines())

    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the Space's own copy of the code runs
    env.update(GRADIO_SERVER_PORT=str(port), GRADIO_SERVER_NAME="127.0.0.1", HF_HUB_OFFLINE="1")
    server = subprocess.Popen([sys.executable, "app.py"], cwd=space, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.time() + 120
        while True:
            try:
                client = Client(url, verbose=False)
                break
            except Exception:
                if server.poll() is not None or time.time() > deadline:
                    raise AssertionError(f"the Space did not start:\n{server.stdout.read()[-3000:]}")
                time.sleep(0.5)
        image = photo(tmp_path)
        gallery, found = client.predict(handle_file(str(image)), api_name="/photo")
        assert [item["caption"] for item in gallery] == ["pose (1 people)"]
        assert len(found["pose"]["people"][0]["keypoints"]) == 17

        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_FLAGS)
            tab = browser.new_page(viewport={"width": 1280, "height": 1000})
            tab.goto(url)
            upload = tab.locator("input[type=file]").first
            upload.set_input_files(str(image))
            tab.get_by_role("button", name="Run").first.click()
            result = tab.locator('img[alt^="pose"]').first
            result.wait_for(timeout=60_000)
            assert tab.wait_for_function("img => img.complete && img.naturalWidth === 192", arg=result.element_handle())
            tab.get_by_text('"people"').first.wait_for(timeout=10_000)  # the JSON of what was found
            if os.environ.get("SAPIENS2_FT_APP_SCREENSHOT"):  # the picture in docs/share.md
                tab.screenshot(path=os.environ["SAPIENS2_FT_APP_SCREENSHOT"], full_page=True)
            upload.set_input_files(str(photo(tmp_path, "big.png", size=(400, 300))))
            tab.get_by_role("button", name="Run").first.click()
            tab.get_by_text("is more than this demo takes").first.wait_for(timeout=30_000)  # a message in the page
            browser.close()
    finally:
        server.terminate()
        server.wait(timeout=30)
        server.stdout.close()
