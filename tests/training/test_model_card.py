"""The model card of every export: Hub metadata that parses, the exported weights' own validation metrics, the run's
data and recipe, the Sapiens2 licence beside it; ``evaluate`` on an export refreshes its results."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import cv2
import numpy as np
import pytest
from huggingface_hub import ModelCard

import datamodules.keypoints as keypoint_sets
from model_cards import card_metrics
from sapiens2_ft.tasks.registry import TASKS, task_spec
from sapiens2_ft.training.hf_export import export_checkpoint
from sapiens2_ft.training.model_card import (CARD_FILE, LICENCE_FILE, PICTURE_FILE, dataset_entry, exported_metrics,
                                             hub_id_of, post_process_text, public_card, refresh_results)


def validation_rows(run_dir: Path) -> list[dict[str, float]]:
    """The val metrics of each validation of a run, in order (metrics.csv)."""
    with open(run_dir / "metrics.csv") as f:
        rows = [r for r in csv.DictReader(f) if r.get("val/loss")]
    return [{k.removeprefix("val/"): float(v) for k, v in r.items() if k.startswith("val/") and v} for r in rows]


def test_export_card_has_hub_metadata_and_the_exported_weights_metrics(pose_run, tiny_coco):
    run_dir, summary = pose_run
    export = Path(summary["export"])
    card = ModelCard.load(export / CARD_FILE)
    data = card.data
    assert (data.license, data.license_name, data.library_name) == ("other", "sapiens2-license", "transformers")
    assert data.license_link.endswith("LICENSE.md") and data.pipeline_tag == task_spec("pose").export.pipeline_tag
    assert {"sapiens2", "human-centric", "pose"} <= set(data.tags)
    assert data.base_model is None  # the run started from a local folder, not a Hub model
    # The export is the best checkpoint (step 2 of 4): its card holds that validation's metrics, not the final ones.
    first, final = validation_rows(run_dir)
    assert summary["best_checkpoint"].endswith("best-step2.ckpt") and first["loss"] != final["loss"]
    assert card_metrics(export) == {tiny_coco.name: pytest.approx(first, rel=1e-5)}  # evaluate may refresh it (same values)
    assert first["AP"] == summary["best_score"]

    text = card.text
    for expected in ("17 keypoints (keypoint set `coco17`)", "the run's best by AP (max), at step 2.", summary["command"], summary["hardware"],
                     "train 8, val 4 (person instances)", "AutoModelForPoseEstimation.from_pretrained",
                     f'sapiens2_ft.load("{export}")', "--detector", f"]({LICENCE_FILE})", f"]({PICTURE_FILE})"):
        assert expected in text, expected
    bundled = (Path(keypoint_sets.__file__).parent / LICENCE_FILE).read_text()
    assert bundled.endswith((export / LICENCE_FILE).read_text())  # the bundled licence, its file note left out
    overlay = cv2.imread(str(run_dir / "overlays" / "pose_0.png"))
    assert np.array_equal(cv2.imread(str(export / PICTURE_FILE)), overlay)


def test_refreshed_results_replace_the_same_data_and_keep_other_data(pose_run, tiny_coco, tmp_path):
    export = shutil.copytree(pose_run[1]["export"], tmp_path / "export")
    data = tiny_coco.name  # the run's data, named by its folder (coco0, coco1, ...: the order tests made them in)
    assert list(card_metrics(export)) == [data] and "AR75" in card_metrics(export)[data]
    refresh_results(export, "pose", {"AP": 0.5, "AP50": 0.75}, dataset_entry(f"/data/{data}"))
    refresh_results(export, "pose", {"AP": 0.25}, dataset_entry("/data/people", "detected boxes"))
    assert card_metrics(export) == {data: {"AP": 0.5, "AP50": 0.75}, "people (detected boxes)": {"AP": 0.25}}
    text = (export / CARD_FILE).read_text()
    assert f"| {data} | 0.5000 | 0.7500 |" in text and "| people (detected boxes) | 0.2500 |  |" in text
    assert text.count("## How to use") == 1 and text.count("## Results") == 1 and "AR75" not in text.split("---")[2]


def test_evaluate_on_an_export_refreshes_its_card(pose_run, tiny_coco, tmp_path):
    from sapiens2_ft import evaluate

    export = shutil.copytree(pose_run[1]["export"], tmp_path / "export")
    card = (export / CARD_FILE).read_text()
    (export / CARD_FILE).write_text(card.replace("value: 0.0\n", "value: 0.123\n"))  # a stale card
    found = evaluate.main(["--config", "pose_coco.yaml", "--data.root", str(tiny_coco), "--data.batch_size", "2",
                           "--data.num_workers", "0", "--model.sigma", "2", "--model", str(export),
                           "--out", str(tmp_path / "eval")])
    assert card_metrics(export) == {tiny_coco.name: pytest.approx(found["metrics"])}


def test_evaluate_on_detected_boxes_adds_its_results_beside_the_ground_truth_boxes(pose_run, tiny_coco, tmp_path):
    """Scores on detected boxes are another entry of the card, "(detected boxes)": the scores on the annotations'
    boxes (the run's validation) stay, and are not replaced by the lower ones of other boxes."""
    from sapiens2_ft import evaluate

    export = shutil.copytree(pose_run[1]["export"], tmp_path / "export")
    before = card_metrics(export)
    coco = json.loads((tiny_coco / "annotations" / "person_keypoints_val2017.json").read_text())
    detections = [{"image_id": a["image_id"], "category_id": 1, "score": 0.9,
                   "bbox": [a["bbox"][0] + 8, a["bbox"][1] - 6, a["bbox"][2] * 0.8, a["bbox"][3]]}
                  for a in coco["annotations"]]  # boxes off the people a little
    (tmp_path / "detections.json").write_text(json.dumps(detections))
    found = evaluate.main(["--config", "pose_coco.yaml", "--data.root", str(tiny_coco), "--data.batch_size", "2",
                           "--data.num_workers", "0", "--model.sigma", "2", "--model", str(export),
                           "--boxes", str(tmp_path / "detections.json"), "--out", str(tmp_path / "eval")])
    assert card_metrics(export) == {**before, f"{tiny_coco.name} (detected boxes)": pytest.approx(found["metrics"])}
    assert found["metrics"] != pytest.approx(before[tiny_coco.name])


def test_a_checkpoint_is_given_the_metrics_of_its_own_step_only():
    """The card's metrics: the validation the checkpoint records when it ran at the checkpoint's step, else the
    run's final ones when the run ended at that step, else none (the card says so), never another step's."""
    def checkpoint(step, validated=None, metrics=None):
        return SimpleNamespace(global_step=step, validation=None if validated is None else {
            "step": validated, "metrics": metrics})

    run = {"global_step": 9, "metrics": {"AP": 0.9}}
    assert exported_metrics(checkpoint(4, 4, {"AP": 0.4}), run) == {"AP": 0.4}  # a best checkpoint
    assert exported_metrics(checkpoint(9, 8, {"AP": 0.8}), run) == {"AP": 0.9}  # last.ckpt before the final validation
    assert exported_metrics(checkpoint(5, 4, {"AP": 0.4}), run) == {}  # saved between validations, the run went on
    assert exported_metrics(checkpoint(3), run) == {}  # saved before any validation


@pytest.mark.parametrize("pretrained, hub_id", [
    ("facebook/sapiens2-pose-0.4b", "facebook/sapiens2-pose-0.4b"),
    ("/cache/hub/models--facebook--sapiens2-seg-1b/snapshots/abc123", "facebook/sapiens2-seg-1b"),
    ("assets/sapiens2-mini-synthetic", None), ("./my/backbone", None), ("/data/model", None), (None, None)])
def test_base_model_is_a_hub_id_only(pretrained, hub_id):
    assert hub_id_of(pretrained) == hub_id



DENSE = [name for name, spec in TASKS.items() if spec.data.targets is not None]


@pytest.mark.parametrize("scale", [1.0, 0.25])
@pytest.mark.parametrize("task", DENSE)
def test_the_card_says_what_transformers_post_processing_does(task, scale):
    """Where transformers undoes the task's resize (``TaskSpec.transformers_post_processes``, held against predict by
    ``tests/apps/test_processor_parity.py``) the card names the call; elsewhere it says why not and what to do."""
    spec = task_spec(task)
    text = post_process_text(task, scale)
    if spec.transformers_post_processes(scale):
        assert f"`processor.{spec.export.post_process}(outputs, " in text and "predict" not in text
    else:
        assert "Resize the outputs to the input size, remove the letterbox" in text and "predict" in text
        assert ("has no post-processing" in text) == (spec.export.post_process is None)
        assert ("fails on them" in text) == (spec.export.post_process is not None and spec.export.unpads)
    assert post_process_text("pose", scale) == ""  # person crops: the card's top-down note covers them


def test_an_export_card_says_how_to_post_process_with_transformers(seg_checkpoint, tmp_path):
    """The export's own card, and the one it publishes, read its head's output size (the tiny seg head: a quarter)."""
    out = export_checkpoint(seg_checkpoint, tmp_path / "export")
    card = (out / CARD_FILE).read_text()
    call = "`processor.post_process_semantic_segmentation(outputs, target_sizes=[(h, w)])`"
    assert call in card and "(its maps come out at 0.25 of the input size)" in card
    assert call in public_card(out, "someone/seg-model")


def test_the_card_gives_each_class_iou_by_name_of_the_exported_step(tmp_path):
    """The validation's per-class table of the exported step, by name (another step's is not read)."""
    import torch

    from sapiens2_ft.tasks.seg.metric import SegmentationMetrics
    from sapiens2_ft.training.callbacks.diagnostics import write_diagnostics
    from sapiens2_ft.training.model_card import per_class_text

    names = ["Background", "Head", "Bag"]
    metric = SegmentationMetrics(3, class_names=names)
    metric.update(torch.tensor([[[0, 1, 1, 0]]]), torch.tensor([[[0, 1, 0, 0]]]))  # Bag neither labelled nor found
    metric.compute()
    write_diagnostics(tmp_path / "diagnostics" / "step_7", metric.diagnostics())
    text = per_class_text(tmp_path, 7)
    assert "| Background | 0.6667 | 0.6667 | 3 |" in text and "| Head | 0.5000 | 1.0000 | 1 |" in text
    assert "| Bag | - | - | 0 |" in text and "step 7" in text
    assert per_class_text(tmp_path, 8) == "" and per_class_text(None, 7) == ""
