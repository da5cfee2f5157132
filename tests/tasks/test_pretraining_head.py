"""``model.pretraining_head``: a fine-tuning run's head starts from the head its backbone was pretrained with (the
shipped demo backbone's ``pretraining_heads.safetensors``), and says why not when it cannot."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file

from sapiens2_ft.models.pretraining_heads import HEADS_FILE
from sapiens2_ft.resources import shipped_asset
from sapiens2_ft.tasks.base import TaskModule
from sapiens2_ft.tasks.registry import build_task_model, label_names

ASSET = "assets/sapiens2-mini-synthetic"
TASK_LABELS = {"pose": "coco17", "seg": None, "normal": None, "pointmap": None, "matting": None}


@pytest.mark.parametrize("task", sorted(TASK_LABELS))
def test_every_task_head_of_the_demo_backbone_loads_as_saved(task):
    saved = load_file(shipped_asset(ASSET) / HEADS_FILE)
    model, report = build_task_model(task, label_names(task, TASK_LABELS[task]), (256, 192), pretrained=ASSET,
                                     pretraining_head=True)
    head = {k: v for k, v in model.state_dict().items() if not k.startswith("model.")}
    assert head and set(head) == {k.split(".", 1)[1] for k in saved if k.startswith(f"{task}.")}
    for key, value in head.items():
        assert torch.equal(value, saved[f"{task}.{key}"].float()), key
    assert report.backbone == "pretrained" and report.head == "pretrained" and not report.new
    assert any(f"the '{task}' head of pretraining" in note for note in report.notes), report.notes
    fresh, _ = build_task_model(task, label_names(task, TASK_LABELS[task]), (256, 192), pretrained=ASSET)
    predictor = "decode_head.predictor.weight"
    assert not torch.equal(fresh.state_dict()[predictor], head[predictor])  # off by default: a new head


def test_a_head_that_does_not_fit_names_the_tensors_and_the_way_out():
    with pytest.raises(ValueError, match=r"the 'seg' head in .* does not fit this model \(2 of 6 tensors differ: "
                                         r"decode_head.predictor.bias: saved \[29\], model \[5\].*"
                                         r"set model.pretraining_head: false for a new head"):
        build_task_model("seg", [f"c{i}" for i in range(5)], (256, 192), pretrained=ASSET, pretraining_head=True)


def test_a_backbone_without_heads_says_so(tiny_pretrain_dir):
    with pytest.raises(FileNotFoundError, match=f"has no {HEADS_FILE}"):
        build_task_model("normal", label_names("normal", None), (64, 48), pretrained=str(tiny_pretrain_dir),
                         pretraining_head=True)


def test_the_option_needs_a_pretrained_backbone_unless_a_run_gives_the_weights():
    problems = TaskModule.check_options(pretraining_head=True, size="tiny")
    assert any(p.startswith("model.pretraining_head: true needs model.pretrained") for p in problems), problems
    # --init_from loads a run's whole model, its head too: a demo config's pretraining_head: true is not in the way
    assert not TaskModule.check_options(pretraining_head=True, size="tiny", init_from="runs/x/last.ckpt")


def test_another_label_set_takes_the_heads_rows_by_name():
    """COCO-17 and the feet from the 17-row pretrained pose head: its rows for the 17 names, the feet new."""
    saved = load_file(shipped_asset(ASSET) / HEADS_FILE)
    names = label_names("pose", "coco17_feet")
    model, report = build_task_model("pose", names, (256, 192), pretrained=ASSET, pretraining_head=True)
    head = {k: v for k, v in model.state_dict().items() if not k.startswith("model.")}
    for key in ("decode_head.predictor.weight", "decode_head.predictor.bias"):
        assert head[key].shape[0] == 21
        assert torch.equal(head[key][:17], saved[f"pose.{key}"].float()), key
        assert not torch.equal(head[key][17:], saved[f"pose.{key}"].float()[:4])
    assert torch.equal(head["decode_head.conv_layers.0.convolution.weight"],
                       saved["pose.decode_head.conv_layers.0.convolution.weight"].float())
    assert report.new == ["left_heel", "right_heel", "left_toe", "right_toe"]
    assert any("output rows by name: 17 of its 17, new: left_heel, right_heel, left_toe, right_toe" in n
               for n in report.notes), report.notes


def test_a_class_set_s_merges_start_from_the_pretrained_head_s_rows():
    """The coarse set from the 29-row pretrained seg head: Background and Hair its rows, each merge the mean of its
    sources' rows with log k on the bias (``factory.merged_row``)."""
    from datamodules.body_parts import SAPIENS2_PART_CLASSES
    from datamodules.classes.class_set import load_class_set

    coarse = load_class_set("coarse")
    saved = load_file(shipped_asset(ASSET) / HEADS_FILE)
    model, report = build_task_model("seg", coarse.names, (256, 192), pretrained=ASSET, pretraining_head=True,
                                     label_sources=coarse.merges)
    weight, bias = (model.state_dict()[f"decode_head.predictor.{k}"] for k in ("weight", "bias"))
    saved_weight, saved_bias = (saved[f"seg.decode_head.predictor.{k}"].float() for k in ("weight", "bias"))
    for i, rows in enumerate(coarse.sources):
        ids = [SAPIENS2_PART_CLASSES.index(r) for r in rows]
        torch.testing.assert_close(weight[i], saved_weight[ids].mean(0))
        torch.testing.assert_close(bias[i], saved_bias[ids].mean() + torch.tensor(len(ids)).log())
    assert report.new == [] and any("merged from theirs: Head, Upper_Body, Arms, Hands, Legs, Feet, new: -" in n
                                    for n in report.notes), report.notes
