"""Benchmark the top-down training sample pipeline on one core (one DataLoader worker's worth).

Per sample: JPEG decode, crop (UDP affine warp to the input size), full training augmentation
(flip, half-body, shift/scale/rotation, photometric, blur, dropout) and keypoint targets in crop
pixels -- what ``TopdownPoseDataset.__getitem__`` does. Heatmap targets are not part of it: the
model step renders them on the device. Their cost on one CPU core is timed separately, to show what
rendering them in the workers would add and how many bytes they would add per sample.

Data: a generated COCO-format dataset of 640x480 JPEGs with painted figures, in a temp dir, for
the COCO-17 set and for a 308-keypoint set (COCO-17 names + ``kp_17`` .. ``kp_307`` along the limbs).

Run: ``python bench/pose_pipeline.py [--samples N] [--input-size H W]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("NO_ALBUMENTATIONS_UPDATE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import cv2  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
import yaml  # noqa: E402

from datamodules.coco_keypoints import load_instances  # noqa: E402
from datamodules.boundary.images import read_image  # noqa: E402
from datamodules.keypoints.metainfo import load_metainfo  # noqa: E402
from datamodules.pose_dataset import TopdownPoseDataset  # noqa: E402
from datamodules.transforms import affine  # noqa: E402
from datamodules.transforms.topdown import TopdownAugment  # noqa: E402
from sapiens2_ft.tasks.pose.codec import encode_heatmaps, input_to_heatmap_coords  # noqa: E402

TARGET_SAMPLES_PER_S = 40.0  # with 17 keypoints, at 1024x768, one core
IMAGE_HW = (480, 640)

COCO17 = ["nose", "left_eye", "right_eye", "left_ear", "right_ear", "left_shoulder", "right_shoulder",
          "left_elbow", "right_elbow", "left_wrist", "right_wrist", "left_hip", "right_hip",
          "left_knee", "right_knee", "left_ankle", "right_ankle"]
COCO_SIGMAS = [0.026, 0.025, 0.025, 0.035, 0.035, 0.079, 0.079, 0.072, 0.072,
               0.062, 0.062, 0.107, 0.107, 0.087, 0.087, 0.089, 0.089]
# A standing figure in a unit box (x right, y down), COCO-17 order.
POSE = np.array([[.5, .08], [.54, .06], [.46, .06], [.58, .08], [.42, .08], [.66, .22], [.34, .22],
                 [.72, .38], [.28, .38], [.75, .52], [.25, .52], [.6, .55], [.4, .55], [.62, .75],
                 [.38, .75], [.62, .95], [.38, .95]])
LIMBS = [(5, 7), (7, 9), (6, 8), (8, 10), (11, 13), (13, 15), (12, 14), (14, 16), (5, 6), (11, 12),
         (5, 11), (6, 12)]


def _background(rng: np.random.Generator) -> np.ndarray:
    """Smooth colour blobs, a gradient, some shapes and sensor noise: JPEG-sized like a photo."""
    h, w = IMAGE_HW
    low = rng.integers(30, 220, size=(6, 8, 3)).astype(np.float32)
    image = cv2.resize(low, (w, h), interpolation=cv2.INTER_CUBIC)
    image += np.linspace(-30, 30, w, dtype=np.float32)[None, :, None]
    for _ in range(int(rng.integers(4, 10))):
        colour = tuple(float(c) for c in rng.integers(0, 255, 3))
        x, y = int(rng.integers(0, w)), int(rng.integers(0, h))
        if rng.random() < 0.5:
            cv2.rectangle(image, (x, y), (x + int(rng.integers(20, 200)), y + int(rng.integers(20, 150))), colour, -1)
        else:
            cv2.circle(image, (x, y), int(rng.integers(10, 80)), colour, -1)
    image += rng.normal(0, 8, image.shape).astype(np.float32)
    return image


def _figure(image: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, list[float]]:
    """Paint one person; returns its 17 keypoints (x, y) and box [x, y, w, h]."""
    h, w = IMAGE_HW
    bh = rng.uniform(0.45, 0.9) * h
    bw = bh * rng.uniform(0.35, 0.5)
    x0, y0 = rng.uniform(0, w - bw), rng.uniform(0, h - bh)
    kpts = POSE * [bw, bh] + [x0, y0] + rng.normal(0, 0.02 * bh, POSE.shape)
    skin = tuple(float(c) for c in rng.integers(90, 230, 3))
    cloth = tuple(float(c) for c in rng.integers(0, 255, 3))
    thick = max(3, int(bh / 22))
    torso = np.array([kpts[5], kpts[6], kpts[12], kpts[11]], np.int32)
    cv2.fillConvexPoly(image, torso, cloth)
    for a, b in LIMBS:
        cv2.line(image, tuple(int(v) for v in kpts[a]), tuple(int(v) for v in kpts[b]),
                 cloth if a >= 11 else skin, thick, cv2.LINE_AA)
    head_r = int(0.06 * bh)
    cv2.circle(image, tuple(int(v) for v in kpts[0]), head_r, skin, -1, cv2.LINE_AA)
    for k in (1, 2):
        cv2.circle(image, tuple(int(v) for v in kpts[k]), max(1, head_r // 6), (20, 20, 20), -1)
    low, high = kpts.min(0), kpts.max(0)
    x, y = float(low[0] - 8), float(low[1] - head_r)
    box = [x, y, float(high[0] + 8 - x), float(high[1] + 8 - y)]
    return kpts, box


def _extra_points(kpts: np.ndarray, count: int, rng: np.random.Generator) -> np.ndarray:
    """``count`` more keypoints spread along the limbs (a dense set like the 308 Sapiens2 points)."""
    limbs = [LIMBS[i % len(LIMBS)] for i in range(count)]
    t = (np.arange(count) // len(LIMBS) + 1) / (count // len(LIMBS) + 2)
    a = kpts[[la for la, _ in limbs]]
    b = kpts[[lb for _, lb in limbs]]
    return a + (b - a) * t[:, None] + rng.normal(0, 1.0, (count, 2))


def make_dataset(root: Path, num_images: int, num_keypoints: int, seed: int = 0) -> tuple[Path, Path]:
    """JPEGs in ``root/images`` and ``root/annotations/train.json``; returns (json, images dir)."""
    rng = np.random.default_rng(seed)
    images_dir = root / "images"
    images_dir.mkdir(parents=True, exist_ok=True)
    (root / "annotations").mkdir(exist_ok=True)
    images, annotations = [], []
    for i in range(num_images):
        image = _background(rng)
        for _ in range(int(rng.integers(1, 4))):
            kpts, box = _figure(image, rng)
            if num_keypoints > 17:
                kpts = np.concatenate([kpts, _extra_points(kpts, num_keypoints - 17, rng)])
            flat = np.concatenate([kpts, np.full((len(kpts), 1), 2.0)], 1).reshape(-1)
            annotations.append({"id": len(annotations) + 1, "image_id": i + 1, "category_id": 1,
                                "keypoints": [round(float(v), 2) for v in flat], "num_keypoints": len(kpts),
                                "bbox": box, "area": box[2] * box[3], "iscrowd": 0})
        image = cv2.GaussianBlur(np.clip(image, 0, 255).astype(np.uint8), (3, 3), 0)
        name = f"{i:06d}.jpg"
        cv2.imwrite(str(images_dir / name), image, [cv2.IMWRITE_JPEG_QUALITY, 90])
        images.append({"id": i + 1, "file_name": name, "height": IMAGE_HW[0], "width": IMAGE_HW[1]})
    ann_file = root / "annotations" / "train.json"
    ann_file.write_text(json.dumps({"images": images, "annotations": annotations,
                                    "categories": [{"id": 1, "name": "person"}]}))
    return ann_file, images_dir


def write_metainfo(path: Path, num_keypoints: int) -> Path:
    names = COCO17 + [f"kp_{k}" for k in range(17, num_keypoints)]
    path.write_text(yaml.safe_dump({
        "name": f"bench{num_keypoints}", "keypoints": names,
        "sigmas": COCO_SIGMAS + [0.05] * (num_keypoints - 17),
        "upper_body": COCO17[:11], "lower_body": COCO17[11:],
    }))
    return path


def time_pipeline(dataset: TopdownPoseDataset, samples: int) -> float:
    """Seconds per sample of ``dataset[i]`` over ``samples`` calls (after a short warm-up)."""
    for i in range(min(5, len(dataset))):
        dataset[i]
    start = time.perf_counter()
    for i in range(samples):
        dataset[i % len(dataset)]
    return (time.perf_counter() - start) / samples


def time_stages(dataset: TopdownPoseDataset, count: int) -> dict[str, float]:
    """Median ms of the main stages, on the first ``count`` instances (no augmentation randomness)."""
    decode, warp, photo = [], [], []
    h, w = dataset.input_size
    for inst in (dataset.instances[i] for i in range(min(count, len(dataset)))):
        t0 = time.perf_counter()
        image = read_image(inst.image_path)
        t1 = time.perf_counter()
        center, scale = affine.box_to_center_scale(inst.bbox, w / h)
        crop = affine.warp_image(image, affine.crop_matrix(center, scale, 15.0, (h, w)), (h, w))
        t2 = time.perf_counter()
        dataset.photometric(image=crop)
        t3 = time.perf_counter()
        decode.append(t1 - t0)
        warp.append(t2 - t1)
        photo.append(t3 - t2)
    return {k: 1e3 * statistics.median(v) for k, v in (("decode", decode), ("warp", warp), ("photometric", photo))}


def time_heatmaps(dataset: TopdownPoseDataset, heatmap_size: tuple[int, int], sigma: float, count: int) -> float:
    """Seconds per sample of ``encode_heatmaps`` (float32, one core) on real sample keypoints."""
    samples = [dataset[i % len(dataset)] for i in range(min(count, 16))]
    coords = [input_to_heatmap_coords(s["keypoints"], dataset.input_size, heatmap_size) for s in samples]
    encode_heatmaps(coords[0], samples[0]["keypoint_weights"], heatmap_size, sigma)
    start = time.perf_counter()
    for i in range(count):
        encode_heatmaps(coords[i % len(coords)], samples[i % len(samples)]["keypoint_weights"], heatmap_size, sigma)
    return (time.perf_counter() - start) / count


def loader_bytes(sample: dict) -> int:
    return sum(v.numel() * v.element_size() for v in sample.values() if isinstance(v, torch.Tensor))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=200, help="timed samples per keypoint set")
    parser.add_argument("--input-size", type=int, nargs=2, default=(1024, 768), metavar=("H", "W"),
                        help="network input (H, W); heatmaps are a quarter of it")
    parser.add_argument("--images", type=int, default=48, help="generated images per dataset")
    args = parser.parse_args()

    torch.set_num_threads(1)
    cv2.setNumThreads(1)
    torch.manual_seed(0)
    input_size = tuple(args.input_size)
    heatmap_size = (input_size[0] // 4, input_size[1] // 4)
    sigma = 6.0 * heatmap_size[0] / 256  # sigma 6 at 256x192 heatmaps (1024x768 input)
    print(f"pose pipeline, one core (torch/cv2 threads 1): input {input_size[0]}x{input_size[1]}, "
          f"heatmaps {heatmap_size[0]}x{heatmap_size[1]} sigma {sigma:g}, {args.samples} samples, "
          f"source images {IMAGE_HW[1]}x{IMAGE_HW[0]} JPEG")
    results = {}
    with tempfile.TemporaryDirectory(prefix="pose-bench-") as tmp:
        for num_k in (17, 308):
            root = Path(tmp) / f"k{num_k}"
            ann_file, images_dir = make_dataset(root, args.images, num_k, seed=num_k)
            spec = "coco17" if num_k == 17 else str(write_metainfo(root / "kp.yaml", num_k))
            meta = load_metainfo(spec)
            instances, _ = load_instances(ann_file, images_dir, meta)
            dataset = TopdownPoseDataset(instances, meta, input_size, TopdownAugment())
            jpeg_kb = statistics.mean(p.stat().st_size for p in images_dir.iterdir()) / 1024
            per_sample = time_pipeline(dataset, args.samples)
            stages = time_stages(dataset, 16)
            per_heatmap = time_heatmaps(dataset, heatmap_size, sigma, max(8, args.samples // 10))
            sample = dataset[0]
            results[num_k] = 1 / per_sample
            hm_f32 = num_k * heatmap_size[0] * heatmap_size[1] * 4
            print(f"\n{num_k} keypoints ({len(instances)} instances, {args.images} images, JPEG {jpeg_kb:.0f} KB avg)")
            print(f"  sample pipeline (decode+crop+augment+keypoints): {1 / per_sample:7.1f} samples/s "
                  f"({1e3 * per_sample:.1f} ms/sample)")
            print("  stages (median ms): " + ", ".join(f"{k} {v:.1f}" for k, v in stages.items()))
            print(f"  heatmap targets encode_heatmaps (f32, 1 core):   {1e3 * per_heatmap:.1f} ms/sample "
                  f"-> pipeline + heatmaps would be {1 / (per_sample + per_heatmap):.1f} samples/s")
            total = loader_bytes(sample)
            print(f"  bytes/sample through the DataLoader: {total:,} B = {total / 2**20:.2f} MiB "
                  f"(uint8 image {sample['image'].numel():,} B + keypoints/weights/affine "
                  f"{total - sample['image'].numel():,} B)")
            print(f"  vs {num_k}x{heatmap_size[0]}x{heatmap_size[1]} heatmap targets: float32 {hm_f32:,} B = "
                  f"{hm_f32 / 2**20:.1f} MiB ({hm_f32 / total:.1f}x), float16 {hm_f32 // 2:,} B = "
                  f"{hm_f32 / 2 / 2**20:.1f} MiB ({hm_f32 / 2 / total:.1f}x)")

    rate = results[17]
    verdict = "PASS" if rate >= TARGET_SAMPLES_PER_S else "FAIL"
    print(f"\ntarget: >= {TARGET_SAMPLES_PER_S:.0f} samples/s with 17 keypoints at {input_size[0]}x{input_size[1]}"
          f" on one core: {rate:.1f} samples/s  {verdict}")


if __name__ == "__main__":
    main()
