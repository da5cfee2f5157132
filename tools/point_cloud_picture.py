"""The docs' point-cloud picture: the ``.ply`` that ``predict`` writes for a synthetic image, drawn from its points.

``python tools/point_cloud_picture.py [--out docs/images/point_cloud.jpg] [--index 0] [--turn 60]``: renders a few
synthetic images (``datamodules.synthetic``), builds the demo backbone's pretrained seg and pointmap models
(``assets/sapiens2-mini-synthetic`` with its pretraining heads: the demos' starting point, nothing fine-tuned), runs
``predict`` with both on one image, reads back ``pointmap/NAME.ply`` and draws, side by side, the image, the points
seen from the camera of the header's intrinsics, and the same points turned ``--turn`` degrees about the vertical
axis through their centre (what a viewer's orbit shows).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import cv2
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
BACKBONE = ROOT / "assets" / "sapiens2-mini-synthetic"
ZOOM = 2  # panels at twice the image's pixels


def read_ply(path: Path) -> tuple[np.ndarray, np.ndarray, dict[str, float]]:
    """(points (N, 3), RGB colours (N, 3), {fx, fy, cx, cy}) of a PLY written by ``predict``."""
    from datamodules.boundary.writes import PLY_VERTEX

    data = path.read_bytes()
    end = data.index(b"end_header\n") + len(b"end_header\n")
    header = data[:end].decode("ascii").splitlines()
    words = next(line for line in header if line.startswith("comment intrinsics ")).split()[2:]
    vertices = np.frombuffer(data[end:], PLY_VERTEX)
    points = np.stack([vertices[a] for a in "xyz"], axis=1).astype(np.float64)
    colours = np.stack([vertices[c] for c in ("red", "green", "blue")], axis=1)
    return points, colours, {k: float(v) for k, v in zip(words[::2], words[1::2])}


def render(points: np.ndarray, colours: np.ndarray, K: dict[str, float], shape: tuple[int, int],
           turn: float = 0.0) -> np.ndarray:
    """RGB (H, W) * ZOOM picture of the points turned ``turn`` degrees about the vertical axis through their centre,
    projected by ``K`` (nearest point in front), 2x2 splats on a dark ground."""
    centre = np.median(points, axis=0)
    a = np.deg2rad(turn)
    rotation = np.array([[np.cos(a), 0, np.sin(a)], [0, 1, 0], [-np.sin(a), 0, np.cos(a)]])
    p = (points - centre) @ rotation.T + centre
    height, width = shape[0] * ZOOM, shape[1] * ZOOM
    u = np.round((K["fx"] * p[:, 0] / p[:, 2] + K["cx"]) * ZOOM).astype(int)
    v = np.round((K["fy"] * p[:, 1] / p[:, 2] + K["cy"]) * ZOOM).astype(int)
    picture = np.full((height, width, 3), 24, np.uint8)
    order = np.argsort(-p[:, 2])  # far first: the near points are drawn over them
    for du in (0, 1):
        for dv in (0, 1):
            uu, vv = u[order] + du, v[order] + dv
            inside = (p[order, 2] > 0) & (uu >= 0) & (uu < width) & (vv >= 0) & (vv < height)
            picture[vv[inside], uu[inside]] = colours[order][inside]
    return picture


def captioned(picture: np.ndarray, caption: str) -> np.ndarray:
    strip = np.full((28, picture.shape[1], 3), 24, np.uint8)
    cv2.putText(strip, caption, (8, 19), cv2.FONT_HERSHEY_SIMPLEX, 0.5, (235, 235, 235), 1, cv2.LINE_AA)
    return np.concatenate([strip, picture], axis=0)


def predicted_cloud(work: Path, index: int) -> tuple[np.ndarray, Path]:
    """(the RGB image, its ``.ply``) of ``predict`` with the demo backbone's seg and pointmap models."""
    import torch

    from datamodules.synthetic import generate_dataset
    from sapiens2_ft import predict
    from sapiens2_ft.tasks.pointmap.module import PointmapModule
    from sapiens2_ft.tasks.seg.module import SegmentationModule

    data = work / "synthetic"
    generate_dataset(data, 8, seed=0, progress=False)
    image_path = sorted((data / "val" / "images").iterdir())[index]
    models = []
    for cls in (SegmentationModule, PointmapModule):
        torch.manual_seed(0)
        module = cls(pretrained=str(BACKBONE), pretraining_head=True, input_size=(256, 192))
        module.configure_model()
        module.model.save_pretrained(work / module.inference.task)
        models += ["--model", str(work / module.inference.task)]
    out = predict.main([*models, "--input", str(image_path), "--out", str(work / "out")])
    return cv2.imread(str(image_path))[..., ::-1], out / "pointmap" / f"{image_path.stem}.ply"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "images" / "point_cloud.jpg")
    parser.add_argument("--index", type=int, default=0, help="which synthetic val image")
    parser.add_argument("--turn", type=float, default=60.0, help="degrees about the vertical axis")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as work:
        image, ply = predicted_cloud(Path(work), args.index)
        points, colours, K = read_ply(ply)
    shape = image.shape[:2]
    panels = [captioned(cv2.resize(image, None, fx=ZOOM, fy=ZOOM, interpolation=cv2.INTER_NEAREST), "image"),
              captioned(render(points, colours, K, shape), f"{ply.name}: {len(points)} points, camera view"),
              captioned(render(points, colours, K, shape, args.turn), f"turned {args.turn:g} deg")]
    picture = np.concatenate(panels, axis=1)[..., ::-1]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    cv2.imwrite(str(args.out), picture, [cv2.IMWRITE_JPEG_QUALITY, 88])
    print(f"wrote {args.out} ({picture.shape[1]}x{picture.shape[0]}): {len(points)} points, fx {K['fx']:.1f}")


if __name__ == "__main__":
    main()
