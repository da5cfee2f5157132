"""The extension story of docs/architecture.md ("Adding a task"), proved: a toy dense task added as one folder and
one registry line trains, validates, predicts and exports through the real entry points.

The toy task is ``shading``: one grey channel in [0, 1] per pixel, the light falling on it (the other half of an
image's intrinsic decomposition, albedo x shading), a map kind no built-in task has.
Its folder lives in ``tests/tasks/extension/shading/`` (spec, targets, module, inference, loss, metric, draw) and is
copied to where a real task's goes (``sapiens2_ft/tasks/shading/``), which the test puts on the package's
``__path__``, so the task imports under its real module names. The one edit a real task makes to an existing file, its
line in ``tasks/registry.py``, is made to the registry's own dict, written out as it would read there, and undone
after the test; nothing of the data layer or of the apps is touched. Its config is copied beside; the regenerated
``docs/configs.md`` and its own tests are what a real task adds beyond this; the shared checks
(``tests/tasks/test_registry.py``) run on the entry below.

Model class: ``Sapiens2ForNormalEstimation`` with ``num_labels = 1``. transformers has no shading model and this
project does not define model classes (docs/architecture.md: the models come from transformers); that class's head
is a plain ``num_labels``-channel per-pixel regressor with no activation in its forward (the normals are made unit
by the caller), so it serves any continuous map, and it has an Auto class (``AutoModelForNormalEstimation``) for the
export. Sharing the class with ``normal`` (as the built-in ``albedo`` does, with three channels; both declare
``shares_class``) is what the export's recorded task (``registry.task_of_config``) is for: predict tells them apart.
"""

from __future__ import annotations

import csv
import json
import math
import shutil
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch

import sapiens2_ft
import sapiens2_ft.tasks as tasks_package
from sapiens2_ft.tasks.registry import TASKS

EXTENSION = Path(__file__).parent / "extension"
SIZE = (64, 48)  # the network input (H, W); the images are 96x72, so every map is resized on the way


@pytest.fixture
def shading_task(tmp_path, monkeypatch) -> Path:
    """The toy task installed as "Adding a task" says: its folder and its registry line; returns its config."""
    # 1. The task folder: sapiens2_ft/tasks/shading/ (spec, targets, inference, module, loss, metric, draw).
    tasks_dir = tmp_path / "sapiens2_ft" / "tasks"
    shutil.copytree(EXTENSION / "shading", tasks_dir / "shading")
    monkeypatch.setattr(tasks_package, "__path__", [*tasks_package.__path__, str(tasks_dir)])
    # 2. Its line in sapiens2_ft/tasks/registry.py: the import of its spec and its name in TASKS,
    #     from sapiens2_ft.tasks.shading.spec import SHADING
    #     TASKS = {spec.name: spec for spec in (POSE, SEG, NORMAL, POINTMAP, MATTING, ALBEDO, SHADING, MULTITASK)}
    from sapiens2_ft.tasks.shading.spec import SHADING

    monkeypatch.setitem(TASKS, "shading", SHADING)
    # 3. A config: configs/shading_demo.yaml.
    config = tmp_path / "configs" / "shading_demo.yaml"
    config.parent.mkdir()
    shutil.copy(EXTENSION / "shading_demo.yaml", config)
    yield config
    for name in [n for n in sys.modules if n.startswith("sapiens2_ft.tasks.shading")]:
        del sys.modules[name]
    if hasattr(tasks_package, "shading"):
        delattr(tasks_package, "shading")


def write_shading_data(root: Path, counts=(("train", 4), ("val", 2)), size=(96, 72), seed: int = 0) -> None:
    """Images of grey rectangles lit by a vertical gradient and tinted, with that shading and a valid mask (the
    rectangles: the background's light is not known)."""
    rng = np.random.default_rng(seed)
    h, w = size
    for split, count in counts:
        for folder in ("images", "shading", "masks"):
            (root / split / folder).mkdir(parents=True, exist_ok=True)
        for i in range(count):
            albedo = np.full((h, w), 0.2, np.float32)
            mask = np.zeros((h, w), bool)
            for _ in range(3):
                y, x = rng.integers(0, h - 24), rng.integers(0, w - 18)
                albedo[y:y + rng.integers(12, 24), x:x + rng.integers(9, 18)] = rng.uniform(0.3, 1.0)
                mask[y:y + 24, x:x + 18] = True
            shading = np.linspace(1.0, 0.6, h, dtype=np.float32)[:, None, None]
            tint = rng.uniform(0.8, 1.0, 3).astype(np.float32)
            image = (albedo[..., None] * shading * tint * 255).round().astype(np.uint8)
            name = f"{i:03d}"
            cv2.imwrite(str(root / split / "images" / f"{name}.png"), image[..., ::-1])
            light = np.broadcast_to(shading[..., 0], (h, w))
            cv2.imwrite(str(root / split / "shading" / f"{name}.png"), (light * 255).round().astype(np.uint8))
            cv2.imwrite(str(root / split / "masks" / f"{name}.png"), mask.astype(np.uint8) * 255)


def finite(values) -> bool:
    return all(isinstance(v, float) and math.isfinite(v) for v in values)


# 5-7 s on the 2-core machine, 12 s at worst beside a busy background job (two CLI steps, a validation, two
# exports, a prediction): the fast tier.
def test_a_new_dense_task_trains_validates_predicts_and_exports(shading_task, tmp_path):
    from transformers import AutoModelForNormalEstimation

    from sapiens2_ft import export
    from sapiens2_ft.predict.cli import main as predict
    from sapiens2_ft.tasks.registry import task_of_config
    from sapiens2_ft.training.cli import main as train

    root, run_dir = tmp_path / "data", tmp_path / "run"
    write_shading_data(root)
    summary = train([
        "--config", str(shading_task), "--run_dir", str(run_dir), "--data.root", str(root),
        "--data.input_size", json.dumps(list(SIZE)), "--data.batch_size", "2", "--data.num_workers", "0",
        "--model.size", "tiny", "--trainer.max_steps", "2", "--trainer.val_check_interval", "2",
        "--trainer.log_every_n_steps", "1", "--trainer.num_sanity_val_steps", "0",
        "--trainer.enable_progress_bar", "false", "--tracking.logger", "csv",
    ])

    # Trained two steps and validated: the task's metric is the run's headline and every value is finite.
    assert summary["global_step"] == 2 and summary["monitor"] == "val/mae"
    assert {"mae", "rmse", "within_0.05", "loss", "l1", "gradient"} <= set(summary["metrics"])
    assert finite(summary["metrics"].values()) and 0 <= summary["metrics"]["mae"] <= 1
    with open(run_dir / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    assert finite([float(r["train/loss"]) for r in rows if r.get("train/loss")][:2])
    assert any(r.get("val/mae") for r in rows)
    # What every run leaves, drawn by the task's own hooks: the data sheet, panels, predictions, diagnostics.
    assert (run_dir / "data_check.png").is_file()
    assert {p.name.rsplit("_", 1)[0] for p in (run_dir / "overlays").glob("*.png")} == {"shading"}
    saved = np.load(run_dir / "predictions" / "000.npy")
    assert saved.shape == SIZE and 0 <= saved.min() and saved.max() <= 1
    assert list((run_dir / "diagnostics").rglob("shading_error*"))

    # The run's export: transformers' own Auto class loads it, one output channel named by the task.
    exported = Path(summary["export"])
    model = AutoModelForNormalEstimation.from_pretrained(exported).eval()
    assert type(model).__name__ == "Sapiens2ForNormalEstimation" and model.config.id2label == {0: "shading"}
    assert task_of_config(model.config) == "shading"  # not "normal", whose class it shares
    preprocessor = json.loads((exported / "preprocessor_config.json").read_text())
    assert preprocessor["size"] == {"height": SIZE[0], "width": SIZE[1]} and preprocessor["do_pad"] is True
    with torch.no_grad():
        assert model(pixel_values=torch.zeros(1, 3, *SIZE)).normals.shape[:2] == (1, 1)
    # python -m sapiens2_ft.export on the best checkpoint gives the same model.
    again = export.main(["--checkpoint", summary["best_checkpoint"], "--out", str(tmp_path / "export")])
    assert json.loads((again / "config.json").read_text()) == json.loads((exported / "config.json").read_text())

    # python -m sapiens2_ft.predict on an image: the map at the image's own size, in [0, 1].
    image = root / "val" / "images" / "001.png"
    out = predict(["--model", str(exported), "--input", str(image), "--out", str(tmp_path / "predicted"),
                   "--workers", "0", "--device", "cpu"])
    shading = np.load(out / "001.npy")
    assert shading.shape == cv2.imread(str(image)).shape[:2] and 0 <= shading.min() and shading.max() <= 1
    assert cv2.imread(str(out / "001_shading.png")).shape[:2] == shading.shape

    # Its inference object, on its own (the Python API): the files predict wrote, and what the web demo reports.
    predictor = sapiens2_ft.load(exported, device="cpu")
    assert type(predictor.inference).__name__ == "ShadingInference" and predictor.labels == ["shading"]
    [result] = predictor.predict(image)
    assert result.maps["shading"].shape == (1, *shading.shape)
    np.testing.assert_allclose(result.files[".npy"], shading, atol=1e-3)
    assert 0 <= predictor.inference.findings(result.files)["mean_shading"] <= 1


def test_a_checkpoint_of_another_task_of_the_same_class_gives_its_backbone_only(shading_task, tmp_path):
    """``normal`` and ``shading`` share ``Sapiens2ForNormalEstimation``. A normal checkpoint as shading's
    ``model.pretrained`` (a released one records no task: its class's first task) gives its backbone and a new
    one-channel head, as a checkpoint of another class would; it used to keep the normal head's three channels."""
    from sapiens2_ft.tasks.registry import build_task_model, task_of_config

    normal, _ = build_task_model("normal", TASKS["normal"].model.outputs, SIZE, size="tiny")
    normal.config.architectures = [type(normal).__name__]
    normal.save_pretrained(tmp_path / "normal")
    assert task_of_config(normal.config) == "normal"
    model, report = build_task_model("shading", ["shading"], SIZE, pretrained=str(tmp_path / "normal"))
    assert (report.backbone, report.head, report.new) == ("pretrained", "new", ["shading"])
    assert model.decode_head.predictor.out_channels == 1 and model.config.id2label == {0: "shading"}
    for name, value in normal.model.state_dict().items():
        torch.testing.assert_close(model.model.state_dict()[name], value)


def test_the_registry_checks_and_the_option_checks_hold_for_the_new_task(shading_task):
    """``tests/tasks/test_registry.py``'s checks (parametrized over ``TASKS``) pass on the new entry, and its own
    option joins the base's problems in one list."""
    import test_registry  # tests/tasks/ is on sys.path under pytest

    from sapiens2_ft.tasks.shading.module import ShadingModule

    test_registry.test_each_entry_names_importable_classes_of_its_task("shading")
    test_registry.test_whole_image_tasks_hand_their_targets_to_the_data_layer()
    test_registry.test_task_modules_keep_the_contract("shading")
    assert ShadingModule.check_options(size="huge", gradient_weight=-1.0) == [
        "model.size: 'huge' is not one of tiny, mini, 0.1b, 0.4b, 0.8b, 1b, 5b (model.pretrained is not set)",
        "model.gradient_weight: -1.0 is negative"]
