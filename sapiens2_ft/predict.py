"""``python -m sapiens2_ft.predict --model DIR_OR_CKPT --input IMAGES --out OUT [--boxes boxes.json]``:
batched inference over an image folder (or one image) with a fine-tuned model.

``--model`` is an exported directory (``<run_dir>/export``), a hub id, or a training checkpoint (exported
to ``OUT/model`` first). The task comes from the model's config.

- pose: one top-down crop per person box (``--boxes``: a COCO json with ``images`` and ``annotations``,
  or a list of ``{"file_name", "bbox": [x, y, w, h], "score"}``; without boxes, the whole image), flip
  test, DARK-UDP decode. Writes ``OUT/keypoints.json`` (COCO keypoint results), ``OUT/images.json``
  (the COCO images and person category they refer to, so ``COCO("images.json").loadRes("keypoints.json")``
  works) and ``OUT/overlays/NAME.jpg``.
- dense tasks: the whole image resized to the model's input size as in validation (stretched for seg,
  letterboxed otherwise); the outputs are mapped back to the image's pixels and written as in validation
  (``NAME.png`` class ids + ``NAME_overlay.png``; ``NAME.npy`` + ``NAME_normal.png`` / ``NAME_depth.png``;
  ``NAME_alpha.png`` + ``NAME_composite.png``).

Images are keyed by their path relative to ``--input``: ``NAME`` keeps the subfolders (``OUT/sub/NAME.png``)
and so does ``file_name`` in ``images.json``. Unreadable images are skipped with a warning and counted.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path, PurePosixPath

import cv2
import numpy as np
import torch
import torch.nn.functional as F
from tqdm import tqdm

from datamodules.dense_augment import validation_fit
from datamodules.dense_transforms import DenseTransform
from datamodules.errors import DataError
from datamodules.images import read_image
from datamodules.transforms import affine
from sapiens2_ft.models.checkpoints import is_distributed_checkpoint
from sapiens2_ft.models.factory import PretrainedNotFoundError, resolve_pretrained
from sapiens2_ft.models.preprocessing import normalize_images
from sapiens2_ft.tasks.base import write_arrays
from sapiens2_ft.tasks.pose.metric import rescore
from sapiens2_ft.tasks.registry import import_class, task_of_architecture, task_spec
from sapiens2_ft.tasks.visualize import draw_keypoints
from sapiens2_ft.training.hf_export import KEYPOINTS_FILE, PREPROCESSOR_FILE, export_checkpoint

IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff"}
KEYPOINT_SCORE_THRESHOLD = 0.2  # instance rescoring, as in validation
DRAW_SCORE_THRESHOLD = 0.3


def list_images(path: Path) -> dict[str, Path]:
    """Images by key: the path relative to ``path`` (POSIX), or the file name when ``path`` is one image."""
    if path.is_file():
        return {path.name: path}
    images = sorted(p for p in path.rglob("*") if p.suffix.lower() in IMAGE_SUFFIXES)
    if not images:
        raise SystemExit(f"--input: no images ({', '.join(sorted(IMAGE_SUFFIXES))}) in {path}")
    return {p.relative_to(path).as_posix(): p for p in images}


def output_name(key: str) -> str:
    """An image key without its suffix: the stem of its output files, subfolders kept."""
    return PurePosixPath(key).with_suffix("").as_posix()


def read_or_warn(path: Path) -> np.ndarray | None:
    """The RGB image at ``path``, or None after a warning naming it when it cannot be read."""
    try:
        return read_image(str(path))
    except DataError as err:
        tqdm.write(f"warning: skipped: {err}", file=sys.stderr)
        return None


def resolve_model(model: str) -> Path:
    """The local directory of ``model`` (a directory or a hub id); errors name ``--model``."""
    try:
        directory = Path(resolve_pretrained(model))
    except PretrainedNotFoundError as err:
        cause = err.__cause__
        if cause is None:  # neither an existing path nor shaped like a hub id
            raise SystemExit(f"--model: '{model}' does not exist (expected an exported directory, a .ckpt, "
                             f"a distributed checkpoint directory or a hub id 'user/name')") from None
        raise SystemExit(f"--model: '{model}' is not a local path and could not be fetched from the Hugging Face "
                         f"Hub ({type(cause).__name__}: {cause}).\nDownload it on a machine with access, e.g. "
                         f"`hf download {model} --local-dir DIR`, copy DIR here and pass `--model DIR`.") from None
    if not (directory / "config.json").is_file():
        raise SystemExit(f"--model: {directory} has no config.json (not an exported model directory)")
    return directory


def load_module(model: str, out: Path, keypoints: str | None = None, device: str = "cpu"):
    """The task's LightningModule around the model at ``model``, in eval mode on ``device``."""
    from transformers import Sapiens2Config

    path = Path(model)
    if path.is_file() or is_distributed_checkpoint(path):
        path = export_checkpoint(path, out / "model")
        print(f"exported checkpoint {model} -> {path}")
    directory = resolve_model(str(path))
    config = Sapiens2Config.from_pretrained(directory)
    architecture = (config.architectures or ["Sapiens2Model"])[0]
    task = task_of_architecture(architecture)
    if task is None or task_spec(task).predictor is None:
        raise SystemExit(f"--model: {model} holds a {architecture}, not a Sapiens2 task model")
    input_size = list(config.image_size)
    if (directory / PREPROCESSOR_FILE).is_file():
        size = json.loads((directory / PREPROCESSOR_FILE).read_text()).get("size") or {}
        input_size = [size.get("height", input_size[0]), size.get("width", input_size[1])]
    kwargs: dict = {"pretrained": str(directory), "input_size": input_size}
    label_arg = task_spec(task).label_arg
    if label_arg == "keypoints":  # the whole keypoint set (skeleton, flip pairs), exported beside the model
        kwargs["keypoints"] = keypoints or str(directory / KEYPOINTS_FILE)
        if not Path(kwargs["keypoints"]).exists() and keypoints is None:
            raise SystemExit(f"--model: {directory} has no {KEYPOINTS_FILE}; pass --keypoints (a set name or YAML)")
    elif label_arg is not None:
        kwargs[label_arg] = [config.id2label[i] for i in range(config.num_labels)]
    module = import_class(task_spec(task).module)(**kwargs)
    module.configure_model()
    return module.eval().to(device), task


def unwarp(maps: torch.Tensor, matrix: np.ndarray, input_size, image_size, mode: str = "bilinear") -> torch.Tensor:
    """Maps (B, C, h, w) predicted for a warped input (``matrix``: image px -> input px) -> image pixels.

    Works at any map resolution: positions are normalised by the input size (pixel centres).
    """
    height, width = image_size
    ys, xs = torch.meshgrid(torch.arange(height, dtype=torch.float64), torch.arange(width, dtype=torch.float64),
                            indexing="ij")
    m = torch.as_tensor(matrix, dtype=torch.float64)
    px = m[0, 0] * xs + m[0, 1] * ys + m[0, 2]
    py = m[1, 0] * xs + m[1, 1] * ys + m[1, 2]
    grid = torch.stack([(px + 0.5) / input_size[1] * 2 - 1, (py + 0.5) / input_size[0] * 2 - 1], dim=-1)
    grid = grid[None].expand(len(maps), -1, -1, -1).to(maps.device, torch.float32)
    return F.grid_sample(maps.float(), grid, mode=mode, padding_mode="border", align_corners=False)


def dense_maps(module, originals: list[np.ndarray]) -> list[dict[str, torch.Tensor]]:
    """``module``'s outputs for whole images, each mapped back to its image's pixels (the validation resize of
    the task's training pipeline: stretched for seg, letterboxed otherwise)."""
    transform = DenseTransform(module.hparams.input_size, fit=validation_fit(None, module.task))
    size = tuple(module.hparams.input_size)
    matrices = [transform.matrix(im.shape[:2], None) for im in originals]
    crops = np.stack([affine.warp_image(im, m, size) for im, m in zip(originals, matrices)])
    outputs = module.infer(normalize_images(torch.from_numpy(crops).permute(0, 3, 1, 2).to(module.device)))
    return [{name: value[i:i + 1] if value.ndim < 4 else unwarp(value[i:i + 1], matrix, size, image.shape[:2])
             for name, value in outputs.items()} for i, (image, matrix) in enumerate(zip(originals, matrices))]


def figure_mask(mask_task: str, outputs: dict[str, torch.Tensor]) -> torch.Tensor:
    """(1, 1, H, W) bool: the people in an image, from a seg model (any class but 0) or a matting model
    (alpha >= 0.5)."""
    if mask_task == "seg":
        return (outputs["logits"].argmax(1, keepdim=True) > 0).cpu()
    return (outputs["alpha"] >= 0.5).cpu()


@torch.no_grad()
def predict_dense(module, images: dict[str, Path], out: Path, batch_size: int, mask_module=None) -> int:
    """Writes the maps of every readable image; returns the number of unreadable images skipped. With
    ``mask_module`` (a seg or matting module), pictures of normals and depth show the people only."""
    items, skipped = list(images.items()), 0
    for start in tqdm(range(0, len(items), batch_size), desc="predict", unit="batch"):
        read = [(key, read_or_warn(path)) for key, path in items[start:start + batch_size]]
        keys, originals = [key for key, im in read if im is not None], [im for _, im in read if im is not None]
        skipped += len(read) - len(keys)
        if not keys:
            continue
        samples = dense_maps(module, originals)
        masks = [figure_mask(mask_module.task, o) for o in dense_maps(mask_module, originals)] if mask_module else None
        for i, (key, image, sample) in enumerate(zip(keys, originals, samples)):
            batch = {"image": torch.from_numpy(image).permute(2, 0, 1)[None]}
            if masks is not None:
                batch["mask"] = masks[i]
            write_arrays(out, output_name(key), module.prediction_files(sample, batch, 0))
    return skipped


def is_person(entry: dict) -> bool:
    """A box of category 1 (person), or of no category."""
    return entry.get("category_id", 1) == 1


def match_file_names(keys: list[str], file_names, source: Path) -> dict[str, str]:
    """Image key -> the ``--boxes`` file name it refers to: the same relative path, else the same bare name
    when exactly one unmatched image and one unmatched file name have it."""
    file_names = {PurePosixPath(f).as_posix() for f in file_names}
    matched = {key: key for key in keys if key in file_names}
    images, files = defaultdict(list), defaultdict(list)
    for key in keys:
        if key not in matched:
            images[PurePosixPath(key).name].append(key)
    for name in sorted(file_names - set(matched)):
        files[PurePosixPath(name).name].append(name)
    for name, candidates in images.items():
        if (len(candidates) > 1 and files.get(name)) or len(files.get(name, [])) > 1:
            raise SystemExit(f"--boxes {source}: '{name}' is ambiguous: images {candidates[:5]} under --input, "
                             f"file names {files[name][:5]} in the boxes file; give file_name relative to --input")
        if files.get(name):
            matched[candidates[0]] = files[name][0]
    return matched


def read_boxes(path: Path | None, keys: list[str]) -> tuple[dict[str, int], dict[str, list]]:
    """Image ids and person boxes ``[x, y, w, h, score]`` by image key (see ``match_file_names``)."""
    ids = {key: i + 1 for i, key in enumerate(keys)}
    if path is None:
        return ids, {}
    data = json.loads(Path(path).read_text())
    by_file: dict[str, list] = {}
    if isinstance(data, dict) and "images" in data:
        names = {im["id"]: PurePosixPath(im["file_name"]).as_posix() for im in data["images"]}
        for ann in data.get("annotations", []):
            if not ann.get("iscrowd", 0) and is_person(ann):
                by_file.setdefault(names[ann["image_id"]], []).append([*ann["bbox"], ann.get("score", 1.0)])
        matched = match_file_names(keys, names.values(), path)
        missing = [key for key in keys if key not in matched]
        if missing:
            raise SystemExit(f"--boxes {path}: no image entry for {missing[:5]}")
        file_ids = {name: i for i, name in names.items()}
        ids = {key: file_ids[name] for key, name in matched.items()}
    elif isinstance(data, list):
        for k, det in enumerate(data):
            if "file_name" not in det or "bbox" not in det:
                raise SystemExit(f"--boxes {path}: entry {k} needs 'file_name' and 'bbox' ([x, y, w, h])")
            if is_person(det):
                by_file.setdefault(PurePosixPath(det["file_name"]).as_posix(), []).append(
                    [*det["bbox"], det.get("score", 1.0)])
        matched = match_file_names(keys, [det["file_name"] for det in data], path)
    else:
        raise SystemExit(f"--boxes {path}: expected a COCO json with 'images' or a list of detections")
    return ids, {key: by_file.get(name, []) for key, name in matched.items()}


@torch.no_grad()
def predict_pose(module, images: dict[str, Path], out: Path, batch_size: int,
                 boxes_file: Path | None) -> tuple[int, int]:
    """Writes the results of every readable image; returns (people, unreadable images skipped)."""
    ids, boxes = read_boxes(boxes_file, list(images))
    input_size = tuple(module.hparams.input_size)
    metainfo = module.metainfo
    results, coco_images, skipped = [], [], 0
    (out / "overlays").mkdir(exist_ok=True)
    for key, path in tqdm(images.items(), desc="predict", unit="image"):
        image = read_or_warn(path)
        if image is None:
            skipped += 1
            continue
        height, width = image.shape[:2]
        coco_images.append({"id": ids[key], "file_name": key, "height": height, "width": width})
        people = boxes.get(key, []) if boxes_file else [[0, 0, width, height, 1.0]]
        overlay = image.copy()
        for start in range(0, len(people), batch_size):
            chunk = np.asarray(people[start:start + batch_size], dtype=np.float64)
            matrices = [affine.crop_matrix(*affine.box_to_center_scale(b[:4], input_size[1] / input_size[0]), 0.0,
                                           input_size) for b in chunk]
            crops = np.stack([affine.warp_image(image, m, input_size, affine.crop_interpolation(m))
                              for m in matrices])
            pixels = torch.from_numpy(crops).permute(0, 3, 1, 2).to(module.device)
            outputs = module.infer(normalize_images(pixels))
            coords, scores = outputs["coords"], outputs["scores"]
            coords, scores = coords.cpu().double().numpy(), scores.cpu().double().numpy()
            instance_scores = rescore(scores, chunk[:, 4], KEYPOINT_SCORE_THRESHOLD)
            for k, matrix in enumerate(matrices):
                points = affine.transform_points(coords[k], affine.invert(matrix))
                flat = np.concatenate([points, scores[k][:, None]], axis=1).reshape(-1)
                results.append({"image_id": ids[key], "category_id": 1, "keypoints": flat.round(2).tolist(),
                                "score": float(instance_scores[k]), "bbox": chunk[k, :4].round(2).tolist()})
                overlay = draw_keypoints(overlay, points, scores[k] > DRAW_SCORE_THRESHOLD, metainfo.skeleton)
        overlay_file = out / "overlays" / f"{output_name(key)}.jpg"
        overlay_file.parent.mkdir(parents=True, exist_ok=True)
        cv2.imwrite(str(overlay_file), overlay[..., ::-1])
    names = list(metainfo.keypoint_names)
    category = {"id": 1, "name": "person", "supercategory": "person", "keypoints": names,
                "skeleton": [[a + 1, b + 1] for a, b in metainfo.skeleton]}
    (out / "keypoints.json").write_text(json.dumps(results))
    (out / "images.json").write_text(json.dumps({"images": coco_images, "annotations": [],
                                                 "categories": [category]}))
    return len(results), skipped


def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(prog="python -m sapiens2_ft.predict", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="exported dir, hub id, .ckpt or distributed checkpoint dir")
    parser.add_argument("--input", required=True, help="an image or a folder of images (searched recursively)")
    parser.add_argument("--out", required=True, help="output folder (created)")
    parser.add_argument("--boxes", default=None, help="pose: person boxes (COCO json or list of detections)")
    parser.add_argument("--keypoints", default=None, help="pose: keypoint set when the model dir has none")
    parser.add_argument("--mask_model", default=None,
                        help="normal / pointmap: a seg or matting model (same forms as --model) whose people mask the "
                             "normal and depth pictures (the .npy files keep every pixel)")
    parser.add_argument("--batch_size", type=int, default=8)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    images = list_images(Path(args.input))
    module, task = load_module(args.model, out, args.keypoints, args.device)
    if task_spec(task).predictor == "pose":
        count, skipped = predict_pose(module, images, out, args.batch_size, Path(args.boxes) if args.boxes else None)
        done = (f"{count} people in {len(images) - skipped} images -> {out / 'keypoints.json'}, "
                f"overlays in {out / 'overlays'}")
    else:
        mask_module = None
        if args.mask_model:
            mask_module, mask_task = load_module(args.mask_model, out / "mask_model", device=args.device)
            if mask_task not in ("seg", "matting"):
                raise SystemExit(f"--mask_model: {args.mask_model} is a {mask_task} model; give a seg or matting one")
        skipped = predict_dense(module, images, out, args.batch_size, mask_module)
        done = f"{task} maps of {len(images) - skipped} images -> {out}"
    print(f"{done}; {skipped} unreadable images skipped")
    if skipped == len(images):
        raise SystemExit(f"--input: none of the {len(images)} images could be read")
    return out


if __name__ == "__main__":
    main()
