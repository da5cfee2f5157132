"""Ask ``sapiens2-ft serve`` for the people in one photo, with ``requests`` alone (docs/deploy.md):
``python docs/examples/serve_client.py URL IMAGE [X Y W H ...]`` sends the image as base64 JSON with its person boxes
(none: the whole image is one person) and prints each person's box, score and best keypoints."""

import base64
import sys

import requests

url, path, numbers = sys.argv[1], sys.argv[2], [float(v) for v in sys.argv[3:]]
boxes = [numbers[i:i + 4] for i in range(0, len(numbers), 4)] or "whole_image"
with open(path, "rb") as f:
    body = {"image": base64.b64encode(f.read()).decode("ascii"), "boxes": boxes, "name": path}
answer = requests.post(f"{url}/predict", json=body, timeout=60)
if answer.status_code != 200:  # 4xx: the request (the message says what), 503: busy, retry later
    sys.exit(f"{answer.status_code}: {answer.json()['detail']}")
found = answer.json()
print(f"{found['name']}: {found['width']} x {found['height']}, {found['task']}, {len(found['people'])} people")
for person in found["people"]:
    best = sorted(person["keypoints"].items(), key=lambda item: -item[1][2])[:3]
    print(f"  box {person['bbox']} score {person['score']}: " + ", ".join(
        f"{name} ({x:.1f}, {y:.1f}) {s:.2f}" for name, (x, y, s) in best))
