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
maps = session.run(None, {"pixel_values": pixels.transpose(2, 0, 1)[None]})[0][0]  # (K, h, w)
if meta["heatmap_output"] == "logits":  # a softmax over each map
    maps = np.exp(maps - maps.max((1, 2), keepdims=True))
    maps /= maps.sum((1, 2), keepdims=True)
k, mh, mw = maps.shape
ys, xs = np.unravel_index(maps.reshape(k, -1).argmax(1), (mh, mw))
crop_xy = np.stack([xs * (W - 1) / (mw - 1), ys * (H - 1) / (mh - 1)], 1)  # heatmap -> crop pixels (UDP)
image_xy = (crop_xy - A[:, 2]) / np.diag(A[:, :2])  # crop -> image pixels
for name, (u, v), s in zip(meta["labels"], image_xy, maps.reshape(k, -1).max(1)):
    print(f"{name:>16} {u:7.1f} {v:7.1f}  {s:.2f}")
