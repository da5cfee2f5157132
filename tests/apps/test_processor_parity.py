"""Predict and the exported processor config agree: what an export's ``preprocessor_config.json`` makes transformers'
own ``Sapiens2ImageProcessor`` do (its preprocessing re-derived, its post-processing run as it is:
``tests/transformers_processor.py``) gives predict's maps, on a landscape and a tall image, for every whole-image
task, wherever the task's spec says transformers undoes its resize (``TaskSpec.transformers_post_processes``). Where
the spec says it does not, transformers' result is wrong or fails, and the model card's recipe (the maps resized to
the input, the letterbox cut away, resized to the image) gives predict's instead.

The heads: the layout the released models use (seg: 4 transposed convolutions; the others: 4 pixel-shuffle blocks:
maps at the input size) and the CPU-sized one of the demos (2 blocks: a quarter of it). The model's outputs are
replaced by a function of its input pixels (a forward hook), so that the maps show where each pixel of the image
went: what is checked is the resize rule, not a random model.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from datamodules.dense.pipelines import LETTERBOX
from sapiens2_ft.models.head_size import output_scale
from sapiens2_ft.tasks.registry import TASKS, inference_class
from sapiens2_ft.training.hf_export import preprocessor_config
from transformers_processor import preprocess, processor

SIZE = (128, 96)  # the network input (H, W), 3:4 as the released models'
SHAPES = {"landscape": (90, 160), "tall": (200, 72)}
RELEASED = {  # the released layouts of tasks/heads.py, with the CPU-sized channels
    "transposed": dict(upsample_out_channels=[8, 8, 8, 8], conv_out_channels=[8]),
    "pixel_shuffle": dict(use_pixel_shuffle=True, upsample_kernel_size=3, upsample_out_channels=[8, 8, 8, 8],
                          conv_kernel_size=3, conv_out_channels=[8], scale_conv_out_channels=[32, 16],
                          scale_conv_kernel_size=1, scale_final_hidden_sizes=[32, 16]),
}
PALETTE = torch.tensor([[30, 30, 200], [200, 40, 40], [40, 200, 60], [220, 220, 40]], dtype=torch.float32)
MEAN, STD = torch.tensor([0.485, 0.456, 0.406])[:, None, None], torch.tensor([0.229, 0.224, 0.225])[:, None, None]

# How each task's results read, ours (its maps at the image's size) and transformers' (what its post-processing
# returns): seg's class ids, normal's unit normals, pointmap's metric XYZ, matting's matte and colours, albedo's
# colours. ``method``: what a user of the export's class calls (the spec's ``post_process``, else its class's).
READ = {
    "seg": dict(ours=lambda m: {"labels": m["logits"][0].argmax(0)}, method="post_process_semantic_segmentation",
                sizes="target_sizes", theirs=lambda r: {"labels": r}),
    "normal": dict(ours=lambda m: {"normals": F.normalize(m["normals"][0], dim=0)},
                   method="post_process_normal_estimation", sizes="source_sizes", theirs=lambda r: r),
    "pointmap": dict(ours=lambda m: {"pointmap": m["pointmap"][0] / m["scale"][0]},
                     method="post_process_pointmap_estimation", sizes="source_sizes", theirs=lambda r: r),
    "matting": dict(ours=lambda m: {"alpha": m["alpha"][0], "foreground": m["foreground"][0]},
                    method="post_process_image_matting", sizes="target_sizes",
                    theirs=lambda r: {"alpha": r["alpha"], "foreground": r["foreground"]}),
    "albedo": dict(ours=lambda m: {"albedo": m["albedo"][0].clamp(0, 1)}, method="post_process_normal_estimation",
                   sizes="source_sizes", theirs=lambda r: {"albedo": r["normals"]}),
}
DENSE = [name for name, spec in TASKS.items() if spec.data.targets is not None]


def test_every_whole_image_task_is_checked():
    assert sorted(READ) == sorted(DENSE)


def released_head(task: str) -> dict:
    """The released layout's kind for ``task`` (its 0.4b head), with few channels."""
    return RELEASED["pixel_shuffle" if TASKS[task].model.heads["0.4b"].get("use_pixel_shuffle") else "transposed"]


def image(shape: tuple[int, int], task: str) -> np.ndarray:
    """Four flat colour blocks for seg (its classes), smooth ramps for the others."""
    height, width = shape
    ys, xs = np.mgrid[:height, :width]
    if task == "seg":
        return PALETTE.numpy()[((xs * 3 // width) + 2 * (ys * 2 // height)) % 4].astype(np.uint8)
    ramp = [40 + 170 * xs / width, 40 + 170 * ys / height, 120 + 80 * np.sin(3 * xs / width) * np.cos(2 * ys / height)]
    return np.stack(ramp, -1).round().astype(np.uint8)


def pixel_outputs(output, pixels: torch.Tensor):
    """The model's output with every map replaced by its input pixels at the map's size: class logits by the nearest
    palette colour, the other maps the sigmoid of the colours (a positive, smooth field); scales 2."""
    for name in ("logits", "normals", "pointmaps", "alphas", "foregrounds"):
        maps = getattr(output, name, None)
        if maps is None:
            continue
        seen = F.interpolate(pixels, size=maps.shape[-2:], mode="area")
        if name == "logits":
            centres = (PALETTE[:, :, None, None] / 255 - MEAN) / STD
            values = torch.full_like(maps, -100.0)
            values[:, :4] = -4 * ((seen[:, None] - centres[None]) ** 2).sum(2)
        else:
            values = torch.sigmoid(seen[:, [i % 3 for i in range(maps.shape[1])]])
        setattr(output, name, values)
    if getattr(output, "scales", None) is not None:
        output.scales = torch.full_like(output.scales, 2.0)
    return output


def card_recipe(maps: torch.Tensor, shape: tuple[int, int], letterbox: bool) -> torch.Tensor:
    """What the card tells a user of transformers to do: the maps (B, C, h, w) resized to the input, the image's box
    of the letterbox cut out (int(h s) x int(w s) in the middle, s = min(H / h, W / w)), resized to the image."""
    maps = F.interpolate(maps, size=SIZE, mode="bilinear", align_corners=False)
    if letterbox:
        s = min(SIZE[0] / shape[0], SIZE[1] / shape[1])
        box = int(shape[0] * s), int(shape[1] * s)
        top, left = (SIZE[0] - box[0]) // 2, (SIZE[1] - box[1]) // 2
        maps = maps[..., top:top + box[0], left:left + box[1]]
    return F.interpolate(maps, size=shape, mode="bilinear", align_corners=False)


def recipe_results(task: str, output, shape: tuple[int, int]) -> dict:
    """The card's recipe on the raw outputs, read as the task's results."""
    letterbox = TASKS[task].resize == LETTERBOX
    maps = {name: card_recipe(getattr(output, name), shape, letterbox) for name in
            ("logits", "normals", "pointmaps", "alphas", "foregrounds") if getattr(output, name, None) is not None}
    named = {"seg": {"logits": maps.get("logits")}, "normal": {"normals": maps.get("normals")},
             "pointmap": {"pointmap": maps.get("pointmaps"), "scale": getattr(output, "scales", None)},
             "matting": {"alpha": maps.get("alphas"), "foreground": maps.get("foregrounds")},
             "albedo": {"albedo": maps.get("normals")}}[task]
    return READ[task]["ours"]({k: v.reshape(-1) if k == "scale" else v for k, v in named.items()})


def differences(ours: dict, theirs: dict, shape: tuple[int, int]) -> dict[str, float]:
    """Per result: the share of differing class ids, or the largest difference away from the image's border (a band
    of about one input pixel, where the letterbox's padding blends in, is left out)."""
    band = int(np.ceil(max(shape[0] / SIZE[0], shape[1] / SIZE[1]))) + 1
    out = {}
    for name, value in ours.items():
        other = theirs[name]
        assert other.shape == value.shape, (name, other.shape, value.shape)
        if value.dtype == torch.int64:
            out[name] = (value != other).float().mean().item()
        else:
            out[name] = (value - other).abs()[..., band:-band, band:-band].max().item()
    return out


def close(ours: dict, theirs: dict, shape: tuple[int, int]) -> bool:
    """Equal results: under 0.1% of the class ids differ; maps within 0.02 (measured: 0.010 at most, against 0.28
    where the letterbox is not undone)."""
    return all(d < (0.001 if ours[name].dtype == torch.int64 else 0.02)
               for name, d in differences(ours, theirs, shape).items())


@lru_cache(maxsize=None)
def built(task: str, head: str):
    """The inference object of a tiny model of ``task`` with the ``released`` or the ``cpu`` head."""
    inference = inference_class(task)(SIZE)
    inference.model, _ = inference.build(size="tiny", head=released_head(task) if head == "released" else None)
    return inference.to("cpu")


@pytest.mark.parametrize("shape", list(SHAPES.values()), ids=list(SHAPES))
@pytest.mark.parametrize("head", ["released", "cpu"])
@pytest.mark.parametrize("task", DENSE)
def test_predict_is_what_the_exported_processor_makes_transformers_do(task, head, shape):
    spec, read = TASKS[task], READ[task]
    inference = built(task, head)
    scale = output_scale(inference.model.config)
    assert scale == (1.0 if head == "released" else 0.25)
    hook = inference.model.register_forward_hook(lambda module, args, output: pixel_outputs(output, args[0]))
    picture = image(shape, task)
    settings = preprocessor_config(task, SIZE)
    assert settings["do_pad"] == (spec.resize == LETTERBOX)  # the export's resize is the task's
    with torch.no_grad():
        ours = read["ours"](inference.image_outputs([picture])[0])
        output = inference.model(preprocess(picture, settings))
        recipe = recipe_results(task, output, shape)
    hook.remove()
    method = getattr(processor(settings), read["method"])
    try:
        theirs = read["theirs"](method(output, **{read["sizes"]: [shape]})[0])
    except RuntimeError as err:  # it crops in input pixels: nothing is left of maps a quarter of that size
        assert "Input and output sizes should be greater than 0" in str(err)
        theirs = None
    agreed = theirs is not None and close(ours, theirs, shape)
    assert agreed == spec.transformers_post_processes(scale), (theirs and differences(ours, theirs, shape))
    assert close(ours, recipe, shape), differences(ours, recipe, shape)  # the card's recipe holds everywhere



@pytest.mark.parametrize("task", DENSE)
def test_the_onnx_config_states_the_same_resize(task, tmp_path):
    """``onnx_config.json`` (what a runtime without this package reads) resizes as the task's spec says, and its
    decoding ends by undoing that resize."""
    from types import SimpleNamespace

    from datamodules.boundary.writes import write_json
    from sapiens2_ft.tasks.saved_model import PREPROCESSOR_FILE
    from sapiens2_ft.training.onnx_export import RESIZE_STEPS, onnx_config

    write_json(tmp_path, PREPROCESSOR_FILE, preprocessor_config(task, SIZE))
    labels = TASKS[task].model.outputs or ("a", "b")
    config = SimpleNamespace(architectures=[TASKS[task].model.model_class], num_labels=len(labels),
                             id2label=dict(enumerate(labels)))
    meta = onnx_config(tmp_path, config, task, ["maps"], {"maps": [1, len(labels), *SIZE]}, "float32")
    resize, undo = RESIZE_STEPS[TASKS[task].resize]
    assert meta["input"]["resize"] == resize and meta["decode"].endswith(undo)
    assert meta["input"]["resize"].startswith(TASKS[task].resize)
    assert meta["preprocessor"]["do_pad"] == (TASKS[task].resize == LETTERBOX)


def test_each_declared_post_process_is_transformers():
    from transformers_processor import processor_class

    declared = {spec.export.post_process for spec in TASKS.values() if spec.export.post_process}
    assert declared and all(callable(getattr(processor_class(), name, None)) for name in declared)
