"""Run an exported pose model with onnxruntime, numpy and OpenCV alone (docs/deploy.md):
``python docs/examples/onnx_pose.py MODEL_DIR IMAGE X Y W H`` prints each keypoint of the person in box X Y W H."""

import json, sys
import cv2, numpy as np, onnxruntime as ort

model_dir, image_path, (x, y, w, h) = sys.argv[1], sys.argv[2], map(float, sys.argv[3:7])  # a person box, xywh
meta = json.load(open(f"{model_dir}/onnx_config.json"))
_, _, H, W = meta["input"]["shape"]
cx, cy, w, h = x + w / 2, y + h / 2, w * 1.25, h * 1.25  # the box, padded by 1.25 and widened to W / H
w, h = max(w, h * W / H), max(h, w * H / W)
A = np.array([[(W - 1) / w, 0, (W - 1) / 2 - cx * (W - 1) / w], [0, (H - 1) / h, (H - 1) / 2 - cy * (H - 1) / h]])
flags = cv2.INTER_LINEAR if min(A[0, 0], A[1, 1]) < 1 else cv2.INTER_CUBIC  # shrinking / enlarging, as upstream
crop = cv2.warpAffine(cv2.imread(image_path)[..., ::-1], A, (W, H), flags=flags)  # the RGB person crop
pixels = ((crop - np.float32(meta["input"]["mean"])) / np.float32(meta["input"]["std"])).astype(np.float32)
session = ort.InferenceSession(f"{model_dir}/{meta['model']}")
logits = meta["heatmap_output"] == "logits"


def maps_of(pixels):  # (K, h, w) heatmaps, or each map's softmax for a logits head
    maps = session.run(None, {"pixel_values": np.ascontiguousarray(pixels.transpose(2, 0, 1)[None])})[0][0]
    if logits:
        maps = np.exp(maps - maps.max((1, 2), keepdims=True))
        maps /= maps.sum((1, 2), keepdims=True)
    return maps


flip = np.arange(len(meta["labels"]))  # flip test: the mirrored crop's maps, mirrored back, left / right swapped
for a, b in meta["flip_pairs"]:
    flip[a], flip[b] = b, a
maps = (maps_of(pixels) + maps_of(pixels[:, ::-1])[flip][:, :, ::-1]) / 2
k, mh, mw = maps.shape
ys, xs = np.unravel_index(maps.reshape(k, -1).argmax(1), (mh, mw))
if logits:  # score: the probability mass within r pixels of the most probable one
    r = max(1, round(2 * meta["preprocessor"]["keypoint_heatmap_sigma"]))
    padded = np.pad(maps, ((0, 0), (r, r), (r, r)))
    scores = np.array([padded[i, y:y + 2 * r + 1, x:x + 2 * r + 1].sum() for i, (x, y) in enumerate(zip(xs, ys))])
else:  # score: the heatmap's peak (a training target peaks at 1)
    scores = maps.reshape(k, -1).max(1)
crop_xy = np.stack([xs * (W - 1) / (mw - 1), ys * (H - 1) / (mh - 1)], 1)  # heatmap -> crop pixels (UDP)
image_xy = (crop_xy - A[:, 2]) / np.diag(A[:, :2])  # crop -> image pixels
for name, (u, v), s in zip(meta["labels"], image_xy, scores.clip(0, 1)):
    print(f"{name:>16} {u:7.1f} {v:7.1f}  {s:.4f}")
