"""A real Label Studio: the pre-annotations of ``predict --format labelstudio`` imported through its API into a
project made with the config ``sapiens2-ft label-config`` prints, its images served by its local-files storage,
the predictions accepted as annotations (its "Create annotations from predictions" action), the project exported and
converted back by ``convert label-studio``: the same keypoints (within 0.5 px) and the same class maps as predict's.

Label Studio runs in its own virtual environment (its pins are not ours): ``SAPIENS2_FT_LABEL_STUDIO`` names its
``label-studio`` executable, else ``.label-studio/bin/label-studio`` in the checkout, which this test installs when it
is missing (``pip install label-studio "sentry-sdk<3"``: Label Studio 1.23 fails to start with sentry-sdk 3). It skips
only when that install fails (no package registry); ``.ci/run`` installs it first. Slow: ~2-4 min, most of it the
server's first start (its database migrations)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import cv2
import numpy as np
import pytest

from sapiens2_ft.convert import convert
from sapiens2_ft.labelling.config import main as label_config
from test_labelling import people_by_image, photos, predicted_people, run_pose, run_seg, tiny_seg_dir  # noqa: F401

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
VENV = REPO / ".label-studio"
INSTALL = ["label-studio", "sentry-sdk<3"]
TOKEN = "0123456789abcdef0123456789abcdef01234567"


def label_studio() -> Path:
    """The ``label-studio`` executable, installed into ``.label-studio/`` when there is none; a skip naming why
    when it cannot be installed (a failure under ``CI=true``)."""
    given = os.environ.get("SAPIENS2_FT_LABEL_STUDIO")
    if given:
        return Path(given)
    executable = VENV / "bin" / "label-studio"
    if not executable.is_file():
        try:
            subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True, capture_output=True)
            subprocess.run([str(VENV / "bin" / "pip"), "install", "-q", *INSTALL], check=True, capture_output=True,
                           text=True, timeout=1200)
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as err:
            shutil.rmtree(VENV, ignore_errors=True)
            why = (f"Label Studio could not be installed (pip install {' '.join(INSTALL)} into {VENV}): "
                   f"{str(getattr(err, 'stderr', '') or err)[-400:]}")
            if os.environ.get("CI") == "true":  # CI installs it (.ci/run): there, a missing server is a failure
                pytest.fail(why)
            pytest.skip(why)
    return executable


class Server:
    """A Label Studio on localhost, its local-files document root ``root``, and its REST API."""

    def __init__(self, executable: Path, data: Path, root: Path):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        env = {**os.environ, "LABEL_STUDIO_LOCAL_FILES_SERVING_ENABLED": "true",
               "LABEL_STUDIO_LOCAL_FILES_DOCUMENT_ROOT": str(root), "SENTRY_DSN": "", "FRONTEND_SENTRY_DSN": ""}
        self.log = (data / "server.log").open("w")
        self.process = subprocess.Popen(
            [str(executable), "start", "--no-browser", "--port", str(self.port), "--internal-host", "127.0.0.1",
             "--data-dir", str(data), "--username", "labeller@example.com", "--password", "labeller-pass",
             "--user-token", TOKEN, "--enable-legacy-api-token"], env=env, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 600
        while time.time() < deadline:
            assert self.process.poll() is None, (data / "server.log").read_text()[-3000:]
            try:
                if urllib.request.urlopen(f"{self.url}/health", timeout=5).status == 200:
                    return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                time.sleep(2)
        raise AssertionError("Label Studio did not answer /health in 600 s")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def call(self, method: str, path: str, data=None, raw: bool = False):
        request = urllib.request.Request(f"{self.url}{path}", method=method,
                                         data=None if data is None else json.dumps(data).encode(),
                                         headers={"Authorization": f"Token {TOKEN}",
                                                  "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=120) as response:
                body = response.read()
        except urllib.error.HTTPError as err:
            raise AssertionError(f"{method} {path}: {err.code} {err.read()[:800]!r}") from None
        return body if raw else json.loads(body or b"null")

    def round_trip(self, title: str, config: str, tasks: list, storage: Path) -> list:
        """A project of ``config`` with a local-files storage on ``storage``, the ``tasks`` imported, their predictions
        accepted as annotations; returns its JSON export."""
        project = self.call("POST", "/api/projects", {"title": title, "label_config": config})["id"]
        self.call("POST", "/api/storages/localfiles", {"project": project, "path": str(storage), "title": "photos",
                                                       "use_blob_urls": True})
        imported = self.call("POST", f"/api/projects/{project}/import", tasks)
        assert imported["task_count"] == len(tasks), imported
        accepted = self.call("POST", f"/api/dm/actions?id=predictions_to_annotations&project={project}",
                             {"selectedItems": {"all": True, "excluded": []}})
        assert f"Created {len(tasks)} annotations" in accepted["detail"], accepted
        return self.call("GET", f"/api/projects/{project}/export?exportType=JSON&download_all_tasks=true")

    def close(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
        self.log.close()


def printed(capsys, *args: str) -> str:
    capsys.readouterr()
    assert label_config(list(args)) == 0
    return capsys.readouterr().out


def exported(tasks: list, images: Path, folder: Path) -> Path:
    """The export as a user saves it: the JSON beside the images it names."""
    shutil.copytree(images, folder)
    (folder / "project.json").write_text(json.dumps(tasks))
    return folder


def test_label_studio_imports_the_pre_annotations_and_exports_what_convert_reads(
        tiny_pose308_dir, photos, tiny_seg_dir, dense_root, tmp_path, capsys):
    executable = label_studio()
    images, _ = photos
    pose_out = run_pose(tiny_pose308_dir, photos, tmp_path / "pose", "--format", "labelstudio")
    seg_images = dense_root / "val" / "images"
    root = tmp_path / "root"  # the document root: the pose photos in in/ (photos' folder), the seg images in seg/
    shutil.copytree(images, root / "in")
    shutil.copytree(seg_images, root / "seg")
    seg_out = run_seg(tiny_seg_dir, root / "seg", tmp_path / "seg", "--format", "labelstudio")  # ?d=seg/...
    (tmp_path / "ls").mkdir()
    server = Server(executable, tmp_path / "ls", root)
    try:
        pose_tasks = json.loads((pose_out / "tasks.json").read_text())
        pose_config = printed(capsys, "--keypoints", "coco17")
        assert pose_config.split("\n", 1)[1] == (pose_out / "config.xml").read_text().split("\n", 1)[1]
        assert pose_tasks[0]["data"]["image"] == "/data/local-files/?d=in/cam1/000000.jpg"  # ?d=INPUT/KEY
        pose_export = server.round_trip("pose pre-annotations", pose_config, pose_tasks, root / "in")
        served = server.call("GET", pose_tasks[0]["data"]["image"], raw=True)  # the task's image, as the UI loads it
        assert served == (images / "cam1" / "000000.jpg").read_bytes()
        seg_config = printed(capsys, "--model", str(tiny_seg_dir))
        seg_export = server.round_trip("seg pre-annotations", seg_config,
                                       json.loads((seg_out / "tasks.json").read_text()), root / "seg")
    finally:
        server.close()

    assert all(len(t["annotations"]) == 1 and t["annotations"][0]["result"] for t in pose_export + seg_export)
    result = convert("label-studio", exported(pose_export, images, tmp_path / "pose_export"), tmp_path / "pose_data",
                     keypoints="coco17")
    assert not result.problems.fatal, result.problems.format()
    expected = predicted_people(tmp_path, tiny_pose308_dir, photos)
    got = people_by_image(tmp_path / "pose_data" / "annotations" / "train.json")
    assert got.keys() == expected.keys()
    for name, people in expected.items():
        assert len(got[name]) == len(people) == 2
        for a, b in zip(people, got[name]):
            assert np.abs(a[:, :2] - b[:, :2]).max() < 0.5

    result = convert("label-studio", exported(seg_export, seg_images, tmp_path / "seg_export"), tmp_path / "seg_data")
    assert not result.problems.fatal, result.problems.format()
    plain = run_seg(tiny_seg_dir, seg_images, tmp_path / "plain_seg")
    maps = sorted((tmp_path / "seg_data" / "train" / "labels").glob("*.png"))
    assert len(maps) == 2
    for label_file in maps:
        np.testing.assert_array_equal(cv2.imread(str(label_file), cv2.IMREAD_UNCHANGED),
                                      cv2.imread(str(plain / f"{label_file.stem}.png"), cv2.IMREAD_UNCHANGED))
