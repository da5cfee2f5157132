"""The multi-task sheet of one image: the image, then one picture per model (keypoints, seg colours with a legend,
normals and a turbo inverse-depth map on the people only, the matte over a checkerboard)."""

from __future__ import annotations

import cv2
import numpy as np

from sapiens2_ft.tasks.visualize import (draw_keypoints, inverse_depth_turbo, label_overlay, matte_composite,
                                         normal_rgb, side_by_side, with_legend)

KEYPOINT_DRAW_THRESHOLD = 0.3
TRACK_COLORS = [(0, 255, 0), (255, 80, 80), (80, 160, 255), (255, 220, 0), (255, 0, 255), (0, 255, 255),
                (255, 140, 0), (160, 90, 255)]  # a person's colour in videos: by track id


def people_mask(results: dict) -> np.ndarray | None:
    """(H, W) bool: the people, from the seg model (any class but 0), else the matting model (alpha >= 0.5)."""
    if "seg" in results:
        return results["seg"][".png"] > 0
    if "matting" in results:
        return results["matting"]["_alpha.png"] >= 128
    return None


def picture(task: str, result, image: np.ndarray, mask: np.ndarray | None, module) -> tuple[str, np.ndarray]:
    """(title, RGB picture) of one task's result for the sheet (dense: the arrays ``prediction_files`` wrote)."""
    if task == "pose":
        out = image.copy()
        for person in result:
            color = TRACK_COLORS[person["track_id"] % len(TRACK_COLORS)] if "track_id" in person else TRACK_COLORS[0]
            out = draw_keypoints(out, person["points"], person["scores"] > KEYPOINT_DRAW_THRESHOLD,
                                 module.metainfo.skeleton, color)
            if "track_id" in person:
                x, y = (int(v) for v in person["bbox"][:2])
                cv2.putText(out, str(person["track_id"]), (x + 2, y + 14), cv2.FONT_HERSHEY_SIMPLEX, 0.5, color, 1,
                            cv2.LINE_AA)
        return f"pose ({len(result)} people)", out
    if task == "seg":
        return "body parts", label_overlay(image, result[".png"], len(module.class_names))
    if task == "normal":
        return "normals", normal_rgb(result[".npy"].astype(np.float32), mask)
    if task == "pointmap":
        return "inverse depth", inverse_depth_turbo(result[".npy"][..., 2], mask)
    if task == "matting":
        return "matte", matte_composite(image, result["_alpha.png"] / 255.0)
    raise ValueError(f"no sheet picture for task {task}")


def sheet(image: np.ndarray, results: dict, modules: dict, legend: bool = True) -> np.ndarray:
    """One row: the image and each task's picture (``results``/``modules`` by task, in the order given), with
    the legend of the body-part classes present below (``legend``; videos leave it out to keep one frame size)."""
    mask = people_mask(results)
    titles, pictures = ["image"], [image]
    for task, result in results.items():
        title, rgb = picture(task, result, image, mask, modules[task])
        titles.append(title)
        pictures.append(rgb)
    row = side_by_side(pictures, titles)
    if legend and "seg" in results:
        present = [int(c) for c in np.unique(results["seg"][".png"]) if c > 0]
        row = with_legend(row, modules["seg"].class_names, present)
    return row
