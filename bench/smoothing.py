"""Temporal smoothing on rendered clips with known motion: how much ``predict --smooth`` (One-Euro per track) cuts
the jitter of a still figure, and what it costs on a figure moving at constant speed (error to the moving truth,
lag); and what ``--smooth_maps`` does to the normals' flicker.

Each clip is the main figure of a synthetic scene (``datamodules/synthetic/clip.py``, 256x384): still, or moving
sideways at each of ``--speeds`` person heights per second (a walk across the image is about 0.8). Every frame gets
fresh pixel noise (``--noise``, on 0-255) and a person box jittered like a detector's (the true box, its centre and
size moved by ``--box_jitter`` of its size, Gaussian). The pose model runs once per clip
(``sapiens2_ft.predict.pose.estimate``, flip test, as predict); the filters then run on its keypoints as
``predict --smooth`` runs them (``KeypointSmoother``). Measured, in pixels, on the keypoints visible in every frame
that the model finds (its median error over the clip under 10% of the figure's height: a keypoint mistaken for
another, such as a left knee for the right, is an error no filter mends):

- jitter: the mean |x[t+1] - 2 x[t] + x[t-1]| (still clip: the truth's is 0; moving: constant speed, also 0);
- error: the mean distance to the true keypoint;
- lag: how far the filtered keypoints trail the unfiltered ones along the motion, in frames (ms at ``--fps``): the
  mean of (truth - estimate) along the motion over the second half of the moving clip (the filter starts on the
  first frame, so its lag builds up), less the unfiltered keypoints' own (the model's bias along the motion).

Models: ``--pose`` / ``--normal`` (an export), default the demo backbone in ``assets/`` with its pretrained heads.
Run: ``python bench/smoothing.py [--write docs/predict.md]`` (270 s of CPU, user + system: under 3 min on 2 idle
cores); ``--sweep`` prints the grid of ``min_cutoff`` x ``beta`` x ``d_cutoff`` the defaults were chosen from;
``--cache FILE`` keeps the clips and the models' outputs for the next run (the filters alone then take seconds).
"""

from __future__ import annotations

import argparse
import pickle
import re
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from datamodules.synthetic.clip import render_clip  # noqa: E402
from sapiens2_ft.predict.dense import dense_maps  # noqa: E402
from sapiens2_ft.predict.pose import estimate  # noqa: E402
from sapiens2_ft.predict.smoothing import KeypointSmoother, MapBlend, SmoothOptions  # noqa: E402

BACKBONE = ROOT / "assets" / "sapiens2-mini-synthetic"
MARK = ("<!-- bench/smoothing.py: start -->", "<!-- bench/smoothing.py: end -->")
GRID = (0.25, 0.5, 1.0, 2.0), (4.0, 8.0, 16.0, 32.0)  # min_cutoff, beta
D_CUTOFFS = (0.5, 1.0, 2.0)
FOUND = 0.1  # a keypoint counts when its median error over the clip is below this share of the figure's height


def load(task: str, model: str | None):
    """The task's module: an export, or the demo backbone with its pretrained head."""
    if model:
        from sapiens2_ft.predict.loading import load_module

        return load_module(model, Path("/tmp"), device="cpu")[0]
    from sapiens2_ft.tasks.registry import import_class, task_spec

    extra = {"keypoints": "coco17", "loss": "heatmap_ce"} if task == "pose" else {}
    module = import_class(task_spec(task).training.module)(pretrained=str(BACKBONE), pretraining_head=True,
                                                  input_size=(256, 192), **extra)
    module.configure_model()
    return module.eval()


def clip_frames(seed: int, frames: int, pixels_per_frame: float, noise: float, box_jitter: float):
    """(noisy RGB frames, jittered boxes (T, 5), true keypoints (T, 17, 2), visible-in-all (17,), true normals,
    masks, figure height px) of one clip."""
    samples = render_clip(seed, frames, pixels_per_frame)
    rng = np.random.default_rng(seed + 1000)
    images, boxes = [], []
    for s in samples:
        images.append(np.clip(s.image + rng.normal(0, noise, s.image.shape), 0, 255).astype(np.uint8))
        rows, cols = np.nonzero(s.people[0].silhouette)
        x, y, w, h = cols.min(), rows.min(), cols.max() - cols.min() + 1, rows.max() - rows.min() + 1
        dx, dy, dw, dh = rng.normal(0, box_jitter, 4)
        boxes.append([x + dx * w, y + dy * h, w * (1 + dw), h * (1 + dh), 1.0])
    truth = np.stack([s.people[0].keypoints[:, :2] for s in samples])
    visible = np.all([s.people[0].keypoints[:, 2] == 2 for s in samples], axis=0)
    height = float(np.mean([b[3] for b in boxes]))
    return images, np.array(boxes), truth, visible, [s.normals for s in samples], [s.mask for s in samples], height


def figure_height(seed: int) -> float:
    """The main figure's box height (px) in the clips of ``seed``."""
    rows = np.nonzero(render_clip(seed, 1)[0].people[0].silhouette.any(axis=1))[0]
    return float(rows[-1] - rows[0] + 1)


def keypoints(module, images, boxes, batch: int = 8) -> np.ndarray:
    """(T, K, 2) of the one person in each frame."""
    out = []
    for start in range(0, len(images), batch):
        found = estimate(module, images[start:start + batch], [b[None] for b in boxes[start:start + batch]], batch)
        out += [people[0]["points"] for people in found]
    return np.stack(out)


def smoothed(raw: np.ndarray, boxes: np.ndarray, fps: float, options: SmoothOptions | None) -> np.ndarray:
    """``raw`` (T, K, 2) filtered as ``predict --smooth`` does (one track)."""
    if options is None:
        return raw
    smoother, out = KeypointSmoother(options), []
    for t, (points, box) in enumerate(zip(raw, boxes)):
        people = [{"track_id": 0, "points": points, "bbox": box[:4]}]
        smoother(people, t / fps)
        out.append(people[0]["points"])
    return np.stack(out)


def jitter(x: np.ndarray, visible: np.ndarray) -> float:
    return float(np.linalg.norm(x[2:] - 2 * x[1:-1] + x[:-2], axis=-1)[:, visible].mean())


def error(x: np.ndarray, truth: np.ndarray, visible: np.ndarray) -> float:
    return float(np.linalg.norm(x - truth, axis=-1)[:, visible].mean())


def lag(x: np.ndarray, truth: np.ndarray, visible: np.ndarray) -> float:
    """Frames behind the truth along its motion, over the second half of the clip."""
    velocity = np.gradient(truth, axis=0)  # px per frame
    speed = np.linalg.norm(velocity, axis=-1, keepdims=True)
    behind = ((truth - x) * velocity / np.maximum(speed, 1e-9)).sum(-1) / np.maximum(speed[..., 0], 1e-9)
    half = len(x) // 2
    return float(behind[half:, visible].mean())


def keypoint_scores(clips: dict, fps: float, options: SmoothOptions | None) -> dict:
    """Mean over the scenes: the still clips' jitter and error; per speed, the moving clips' error and lag."""
    rows = {}
    for scene in clips.values():
        for kind, clip in scene.items():
            found, truth = clip["visible"], clip["truth"]
            if not found.any():  # the figure left the frame, or the model missed every keypoint
                continue
            x = smoothed(clip["raw"], clip["boxes"], fps, options)
            if kind == "still":
                scores = {"jitter": jitter(x, found), "error": error(x, truth, found)}
            else:
                scores = {"jitter": jitter(x, found), "error": error(x, truth, found), "lag": lag(x, truth, found)}
            for name, value in scores.items():
                rows.setdefault((kind, name), []).append(value)
    return {key: float(np.mean(values)) for key, values in rows.items()}


def normal_maps(module, images: list[np.ndarray], batch: int = 8) -> list[dict]:
    """The normal model's raw outputs of each frame, at the frame's size."""
    return [m for start in range(0, len(images), batch) for m in dense_maps(module, images[start:start + batch])]


def angles(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Degrees between unit vectors (..., 3)."""
    return np.degrees(np.arccos(np.clip((a * b).sum(-1), -1.0, 1.0)))


def normal_scores(clips: dict, weight: float, speed: float) -> tuple[float, float]:
    """Blend weight ``weight`` (as ``--smooth_maps``): the still clips' flicker (mean angle between consecutive
    frames' normals) and the mean angle to the true normals of the clips moving at ``speed``, degrees, on the
    figure."""
    flicker, error_deg = [], []
    for scene in clips.values():
        for kind in ("still", speed):
            blend, previous = MapBlend(weight), None
            clip = scene[kind]
            for maps, truth, mask in zip(clip["normal_maps"], clip["normals"], clip["masks"]):
                n = torch.nn.functional.normalize(blend(maps)["normals"][0].float(), dim=0).permute(1, 2, 0).numpy()
                if kind == "still" and previous is not None:
                    flicker.append(angles(n, previous)[mask].mean())
                if kind != "still":
                    error_deg.append(angles(n, truth)[mask].mean())
                previous = n
    return float(np.mean(flicker)), float(np.mean(error_deg))


def keypoint_table(clips: dict, fps: float, speeds, rows: list[tuple[str, SmoothOptions | None]]) -> list[str]:
    raw = keypoint_scores(clips, fps, None)
    head = "| keypoints | still: jitter px (x raw) | still: error px |" + "".join(
        f" {v:g} heights/s: error px (x raw) | lag frames |" for v in speeds)
    lines = [head, "|---" * (head.count("|") - 1) + "|"]
    for name, options in rows:
        r = keypoint_scores(clips, fps, options)
        cells = [name, f"{r['still', 'jitter']:.2f} (x{r['still', 'jitter'] / raw['still', 'jitter']:.2f})",
                 f"{r['still', 'error']:.2f}"]
        for v in speeds:
            behind = r[v, "lag"] - raw[v, "lag"]
            cells += [f"{r[v, 'error']:.2f} (x{r[v, 'error'] / raw[v, 'error']:.2f})",
                      f"{behind:.2f} ({1000 * behind / fps:.0f} ms)"]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def sweep(clips: dict, fps: float, speeds) -> list[str]:
    """Still jitter and the error at each speed (each x raw) over the grid, for each ``d_cutoff``; * marks the
    settings within 10% of raw's error at every speed."""
    raw = keypoint_scores(clips, fps, None)
    lines = []
    for d_cutoff in D_CUTOFFS:
        lines.append(f"d_cutoff {d_cutoff:g} Hz, min_cutoff \\ beta: " + "  ".join(f"{b:>16}" for b in GRID[1]))
        for min_cutoff in GRID[0]:
            cells = []
            for beta in GRID[1]:
                r = keypoint_scores(clips, fps, SmoothOptions(min_cutoff=min_cutoff, beta=beta, d_cutoff=d_cutoff))
                errors = [r[v, "error"] / raw[v, "error"] for v in speeds]
                cells.append(f"{r['still', 'jitter'] / raw['still', 'jitter']:.2f}/"
                             + "/".join(f"{e:.2f}" for e in errors) + ("*" if max(errors) <= 1.1 else " "))
            lines.append(f"{min_cutoff:>10}: " + "  ".join(f"{c:>16}" for c in cells))
    return lines


def render_and_run(args) -> tuple[dict, list[float]]:
    """Per scene, its clips (still and each speed) with the boxes, truths, found keypoints and the models' outputs."""
    pose, normal = load("pose", args.pose), load("normal", args.normal)
    clips, heights = {}, []
    for seed in range(args.seeds):
        heights.append(figure_height(seed))
        clips[seed] = {}
        for kind, speed in (("still", 0.0), *((v, v) for v in args.speeds)):
            images, boxes, truth, visible, normals, masks, _ = clip_frames(
                seed, args.frames, speed * heights[-1] / args.fps, args.noise, args.box_jitter)
            raw = keypoints(pose, images, boxes)
            truth, visible = truth[:, :raw.shape[1]], visible[:raw.shape[1]]  # the model's COCO-17 come first
            found = visible & (np.median(np.linalg.norm(raw - truth, axis=-1), axis=0) < FOUND * heights[-1])
            clips[seed][kind] = {"boxes": boxes, "truth": truth, "visible": found, "raw": raw, "normals": normals,
                                 "masks": masks, "normal_maps": normal_maps(normal, images) if speed in (
                                     0.0, args.speeds[0]) else None}
        print(f"scene {seed}: figure {heights[-1]:.0f} px tall, keypoints visible throughout and found: "
              + ", ".join(f"{clip['visible'].sum()} {kind}" for kind, clip in clips[seed].items()), flush=True)
    return clips, heights


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pose", default=None, help="a pose export (default: the demo backbone's pretrained head)")
    parser.add_argument("--normal", default=None, help="a normal export (default: the demo backbone's head)")
    parser.add_argument("--seeds", type=int, default=4, help="clips of scenes 0 .. seeds-1")
    parser.add_argument("--frames", type=int, default=30)
    parser.add_argument("--fps", type=float, default=30.0)
    parser.add_argument("--speeds", type=float, nargs="+", default=[0.5, 1.0],
                        help="moving clips: person heights per second (the first: the normals')")
    parser.add_argument("--noise", type=float, default=8.0, help="pixel noise sigma on 0-255")
    parser.add_argument("--box_jitter", type=float, default=0.02, help="box centre / size sigma, of its size")
    parser.add_argument("--sweep", action="store_true", help="print the min_cutoff x beta grid")
    parser.add_argument("--write", default=None, help="put the tables into this markdown file, between the marks")
    parser.add_argument("--cache", type=Path, default=None,
                        help="keep the clips and the models' outputs in this pickle; reuse them when it exists")
    args = parser.parse_args(argv)
    torch.set_grad_enabled(False)
    start = time.perf_counter()
    if args.cache is not None and args.cache.exists():
        clips, heights = pickle.loads(args.cache.read_bytes())
    else:
        clips, heights = render_and_run(args)
        if args.cache is not None:
            args.cache.write_bytes(pickle.dumps((clips, heights)))
    default = SmoothOptions()
    rows = [("raw", None), (f"`--smooth` (min_cutoff {default.min_cutoff:g} Hz, beta {default.beta:g})", default)]
    rows += [(f"min_cutoff {c:g}, beta {b:g}", SmoothOptions(min_cutoff=c, beta=b))
             for c, b in ((0.5, 4.0), (2.0, 16.0), (0.5, 32.0))]
    lines = keypoint_table(clips, args.fps, args.speeds, rows)
    lines += ["", f"| normals | still: flicker deg (x raw) | {args.speeds[0]:g} heights/s: error deg (x raw) |",
              "|---|---|---|"]
    raw_flicker, raw_error = normal_scores(clips, 1.0, args.speeds[0])
    for weight in (1.0, 0.7, 0.5, 0.3):
        flicker, error_deg = normal_scores(clips, weight, args.speeds[0])
        name = "raw" if weight == 1 else f"`--smooth_maps {weight:g}`"
        lines.append(f"| {name} | {flicker:.2f} (x{flicker / raw_flicker:.2f}) | {error_deg:.2f} "
                     f"(x{error_deg / raw_error:.2f}) |")
    setting = (f"{args.seeds} scenes, {args.frames} frames at {args.fps:g} frames/s, 256x384, figures "
               f"{min(heights):.0f}-{max(heights):.0f} px tall; pixel noise sigma {args.noise:g}, box jitter "
               f"{args.box_jitter:g}; d_cutoff {default.d_cutoff:g} Hz; models: "
               f"{args.pose or 'the demo backbone with its pretrained pose head'}, "
               f"{args.normal or 'and normal head'}")
    print("\n".join([setting, *lines]))
    if args.sweep:
        print(f"\nstill jitter / error at {', '.join(f'{v:g}' for v in args.speeds)} heights/s, x raw (* within 10% "
              "of raw's error at each speed):")
        print("\n".join(sweep(clips, args.fps, args.speeds)))
    print(f"{time.perf_counter() - start:.0f} s")
    if args.write:
        page = Path(args.write).read_text()
        block = "\n".join([MARK[0], "", f"*{setting} (`python bench/smoothing.py`).*", "", *lines, "", MARK[1]])
        pattern = re.escape(MARK[0]) + ".*?" + re.escape(MARK[1])
        if not re.search(pattern, page, flags=re.S):
            raise SystemExit(f"--write: {args.write} has no {MARK[0]} ... {MARK[1]} block")
        Path(args.write).write_text(re.sub(pattern, lambda _: block, page, flags=re.S))
        print(f"wrote the tables into {args.write}")


if __name__ == "__main__":
    main()
