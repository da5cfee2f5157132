"""build_model through the task registry: weight transfer between keypoint sets, pretrain-only backbones, errors,
size presets."""

from __future__ import annotations

import pytest
import torch
from conftest import COCO17, tiny_pose_config
from safetensors.torch import load_file
from transformers import Sapiens2Config, Sapiens2ForPoseEstimation, Sapiens2Model

from datamodules.keypoints.metainfo import load_metainfo
from sapiens2_ft.models import presets
from sapiens2_ft.models.factory import PretrainedNotFoundError, head_layout
from sapiens2_ft.tasks.registry import TASKS, build_task_model

INPUT = (256, 192)
SAPIENS2_308_ROWS = {name: i for i, name in enumerate(load_metainfo("sapiens2_308").keypoint_names)}


def _raw_predictor(path) -> tuple[torch.Tensor, torch.Tensor]:
    """The head's last layer as stored in the file (saved in the original Sapiens2 key layout)."""
    raw = load_file(str(path / "model.safetensors"))
    return raw["decode_head.conv_pose.weight"], raw["decode_head.conv_pose.bias"]


def _checkpoint(path, cls=Sapiens2ForPoseEstimation) -> dict[str, torch.Tensor]:
    """The checkpoint's tensors in transformers' key layout (as a plain from_pretrained reads them)."""
    return cls.from_pretrained(str(path)).state_dict()


def _assert_backbone_equal(model, state: dict[str, torch.Tensor], prefix: str) -> None:
    """Every backbone tensor of the model equals the checkpoint's, bit for bit."""
    mine = model.model.state_dict()
    assert len(mine) > 10
    for name, value in mine.items():
        assert torch.equal(value, state[prefix + name]), name


@pytest.fixture(scope="module")
def coco_from_308(tiny_pose308_dir):
    return build_task_model("pose", COCO17, INPUT, pretrained=str(tiny_pose308_dir))


def test_308_to_coco17_transfers_rows_by_name(coco_from_308, tiny_pose308_dir):
    model, report = coco_from_308
    assert report.backbone == "pretrained" and report.head == "transferred"
    assert report.transferred == COCO17 and report.new == []
    state = _checkpoint(tiny_pose308_dir)
    old_w, old_b = _raw_predictor(tiny_pose308_dir)
    assert old_w.shape[0] == 308
    pred = model.decode_head.predictor
    assert pred.weight.shape == (17, *old_w.shape[1:]) and pred.bias.shape == (17,)
    for i, name in enumerate(COCO17):
        row = SAPIENS2_308_ROWS[name]
        assert torch.equal(pred.weight[i], old_w[row]), name
        assert torch.equal(pred.bias[i], old_b[row]), name
    # Not just the first 17 rows: the wrists come from rows 62 and 41.
    assert not torch.equal(pred.weight[COCO17.index("left_wrist")], old_w[COCO17.index("left_wrist")])
    _assert_backbone_equal(model, state, "model.")
    # The rest of the head is the checkpoint's too.
    for key, value in model.decode_head.state_dict().items():
        if not key.startswith("predictor."):
            assert torch.equal(value, state[f"decode_head.{key}"]), key
    assert model.config.num_labels == 17
    assert [model.config.id2label[i] for i in range(17)] == COCO17
    assert model.config.label2id["right_ankle"] == 16
    assert "transferred by name (17)" in str(report)


def test_transferred_model_runs(coco_from_308):
    model, _ = coco_from_308
    with torch.no_grad():
        heatmaps = model.eval()(torch.randn(1, 3, *INPUT)).heatmaps
    assert heatmaps.shape[:2] == (1, 17) and torch.isfinite(heatmaps).all()


def test_same_labels_load_everything(coco_from_308, tmp_path):
    model, _ = coco_from_308
    model.save_pretrained(tmp_path)
    again, report = build_task_model("pose", COCO17, INPUT, pretrained=str(tmp_path))
    assert report.head == "pretrained" and report.backbone == "pretrained"
    assert report.transferred == [] and report.new == []
    x = torch.randn(2, 3, *INPUT, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.equal(model.eval()(x).heatmaps, again.eval()(x).heatmaps)
    ours, theirs = model.state_dict(), again.state_dict()
    assert ours.keys() == theirs.keys()
    assert all(torch.equal(ours[k], theirs[k]) for k in ours)


def test_pretrain_only_backbone_gets_new_head(tiny_pretrain_dir):
    model, report = build_task_model("pose", COCO17, (64, 48), pretrained=str(tiny_pretrain_dir))
    assert isinstance(model, Sapiens2ForPoseEstimation)
    assert report.backbone == "pretrained" and report.head == "new" and report.new == COCO17
    assert model.decode_head.predictor.out_channels == 17
    _assert_backbone_equal(model, _checkpoint(tiny_pretrain_dir, Sapiens2Model), "")
    # No size preset matches the tiny test backbone: the head has the 0.4b released layout.
    layout = head_layout(TASKS["pose"].model.heads, "0.4b")
    assert model.config.head_config.upsample_out_channels == layout["upsample_out_channels"]
    with torch.no_grad():
        heatmaps = model.eval()(torch.randn(1, 3, 64, 48)).heatmaps
    assert heatmaps.shape == (1, 17, 16, 12)


def _named_checkpoint(path, names, pos_embed_rescale=None):
    config = tiny_pose_config(len(names))
    config.id2label = {i: n for i, n in enumerate(names)}
    config.label2id = {n: i for i, n in enumerate(names)}
    config.pos_embed_rescale = pos_embed_rescale
    torch.manual_seed(0)
    Sapiens2ForPoseEstimation(config).save_pretrained(path)
    return path


def test_named_checkpoint_transfers_shared_names(tmp_path):
    source = ["nose", "tail_tip", "left_eye", "head_top", "right_eye"]
    path = _named_checkpoint(tmp_path / "five", source)
    target = ["right_eye", "left_paw", "nose", "right_paw", "left_eye", "tail_base"]
    model, report = build_task_model("pose", target, INPUT, pretrained=str(path))
    assert report.head == "transferred"
    assert report.transferred == ["right_eye", "nose", "left_eye"]
    assert report.new == ["left_paw", "right_paw", "tail_base"]
    state = _checkpoint(path)
    old_w, old_b = _raw_predictor(path)
    pred = model.decode_head.predictor
    assert pred.out_channels == 6
    for i, name in enumerate(target):
        if name in source:
            assert torch.equal(pred.weight[i], old_w[source.index(name)])
            assert torch.equal(pred.bias[i], old_b[source.index(name)])
        else:
            assert torch.equal(pred.bias[i], torch.zeros(()))
            assert pred.weight[i].abs().sum() > 0  # freshly initialised, not zero
    _assert_backbone_equal(model, state, "model.")
    assert "transferred by name (3)" in str(report) and "new (3)" in str(report)


def test_unreachable_hub_id(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(PretrainedNotFoundError) as info:
        build_task_model("pose", COCO17, INPUT, pretrained="no-such-org/sapiens2-pose-nothing")
    message = str(info.value)
    assert "--model.pretrained" in message
    assert "no-such-org/sapiens2-pose-nothing" in message


@pytest.mark.parametrize("path", ["/nonexistent/sapiens2-dir", "./not/here", "a/b/c"])
def test_missing_local_path(path):
    with pytest.raises(PretrainedNotFoundError, match="does not exist"):
        build_task_model("pose", COCO17, INPUT, pretrained=path)


def test_unknown_task_and_size():
    with pytest.raises(ValueError, match="unknown task"):
        build_task_model("depth", COCO17, INPUT, size="tiny")
    with pytest.raises(ValueError, match="model.size"):
        build_task_model("pose", COCO17, INPUT, size="2b")


def _rope_is_random(model) -> bool:
    rope = model.model.rope_embeddings.train()
    x = torch.zeros(1, 3, *INPUT)
    torch.manual_seed(0)
    a = rope(x)[0]
    b = rope(x)[0]
    return not torch.equal(a, b)


def test_pos_embed_rescale_off_by_default(tmp_path):
    # The released checkpoints (and Sapiens2Config) default to 2.0: fine-tuning turns it off.
    assert Sapiens2Config().pos_embed_rescale == 2.0
    path = _named_checkpoint(tmp_path / "rescaled", COCO17, pos_embed_rescale=2.0)
    model, report = build_task_model("pose", COCO17, INPUT, pretrained=str(path))
    assert report.head == "pretrained"
    assert model.config.pos_embed_rescale is None
    assert not _rope_is_random(model)
    model, _ = build_task_model("pose", COCO17, INPUT, size="tiny")
    assert model.config.pos_embed_rescale is None
    model, _ = build_task_model("pose", COCO17, INPUT, pretrained=str(path), pos_embed_rescale=2.0)
    assert model.config.pos_embed_rescale == 2.0
    assert _rope_is_random(model)


def test_size_preset_builds_random_model():
    model, report = build_task_model("pose", COCO17, INPUT, size="tiny", flip_pairs=[[1, 2], [3, 4]])
    assert report.backbone == "random" and report.head == "random"
    assert model.config.hidden_size == presets.BACKBONES["tiny"]["hidden_size"]
    assert model.config.num_hidden_layers == presets.BACKBONES["tiny"]["num_hidden_layers"]
    assert model.decode_head.predictor.out_channels == 17
    assert model.config.flip_pairs == [[1, 2], [3, 4]]
    assert list(model.config.image_size) == list(INPUT)


EXPECTED_BILLIONS = {"0.1b": 0.114, "0.4b": 0.398, "0.8b": 0.818, "1b": 1.462, "5b": 5.071}


@pytest.mark.parametrize("size", list(EXPECTED_BILLIONS))
def test_backbone_preset_parameter_counts(size):
    with torch.device("meta"):
        model = Sapiens2Model(Sapiens2Config(**presets.BACKBONES[size]))
    count = sum(p.numel() for p in model.parameters()) / 1e9
    assert count == pytest.approx(EXPECTED_BILLIONS[size], rel=0.01)
    assert presets.size_of(model.config.hidden_size, model.config.num_hidden_layers) == size


# Head layouts of the upstream configs (facebookresearch/sapiens2 @ 3098c14: pose/configs/keypoints308/*,
# dense/configs/{seg,normal,pointmap}/*), retyped: (upsample channels, conv channels, scale-branch convs, kernel).
UPSTREAM_HEADS = {
    ("pose", "0.4b"): ([1024, 768], [512, 512, 256], None, None),
    ("pose", "0.8b"): ([1024, 768], [512, 512, 256], None, None),
    ("pose", "1b"): ([1536, 1024], [768, 512, 256], None, None),
    ("pose", "5b"): ([1024, 768], [512, 512, 256], None, None),
    **{("seg", s): ([512, 256, 128, 64], [64, 64], None, None) for s in ("0.4b", "0.8b", "1b", "5b")},
    **{("normal", s): ([768, 512, 256, 128], [64, 32, 16], None, None) for s in ("0.4b", "0.8b", "1b")},
    ("normal", "5b"): ([1536, 768, 512, 256], [128, 64, 32], None, None),
    **{("pointmap", s): ([1536, 768, 512, 256], [64, 32, 16], [1536, 512, 128], 1) for s in ("0.4b", "0.8b", "1b")},
    ("pointmap", "5b"): ([1536, 768, 768, 768], [128, 64, 32], [1536, 512, 128], 1),
}


@pytest.mark.parametrize("task,size", sorted(UPSTREAM_HEADS))
def test_head_presets_match_the_upstream_configs(task, size):
    upsample, conv, scale_convs, scale_kernel = UPSTREAM_HEADS[(task, size)]
    layout = head_layout(TASKS[task].model.heads, size)
    assert layout["upsample_out_channels"] == upsample
    assert layout["conv_out_channels"] == conv
    assert layout.get("scale_conv_out_channels") == scale_convs
    assert layout.get("scale_conv_kernel_size") == scale_kernel


def test_5b_pointmap_head_builds_at_full_resolution():
    with torch.device("meta"):
        model, _ = build_task_model("pointmap", TASKS["pointmap"].model.outputs, (1024, 768), size="5b")
        out = model(torch.zeros(1, 3, 1024, 768))
    assert tuple(out.pointmaps.shape) == (1, 3, 1024, 768) and tuple(out.scales.shape) == (1, 1)
