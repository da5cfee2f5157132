"""How body-part labels are drawn, everywhere (validation panels, data sheet, predict's sheets, saved overlays):
class colours over the image, with a legend of the classes shown."""

from __future__ import annotations

import numpy as np

from sapiens2_ft.tasks.sample_pictures import SamplePicture, SheetLabels, as_numpy, caption, sheet_image, sheet_map
from sapiens2_ft.tasks.visualize import label_overlay

IGNORE_INDEX = 255  # the data layer's ignore value: drawn as the image
TITLE = "body parts"


def picture(image: np.ndarray, labels: np.ndarray, num_classes: int, ignore_index: int = IGNORE_INDEX,
            colours=None) -> np.ndarray:
    """Class colours (a class set's ``colours``, else the palette's) over ``image`` (RGB); background (0) and ignored
    pixels show the image."""
    return label_overlay(image, labels, num_classes, ignore_index=ignore_index, colours=colours)


def classes_shown(labels: np.ndarray, num_classes: int) -> list[int]:
    """The classes of ``labels`` a legend lists: present, not background, not ignored."""
    return [int(c) for c in np.unique(labels) if 0 < c < num_classes]


def draw_sample(item: dict, labels: SheetLabels, factor: float) -> SamplePicture:
    """The data sheet's cell: the image and its class colours."""
    classes = sheet_map(item, "labels", factor).astype(np.int64)
    largest = int(classes[classes != IGNORE_INDEX].max(initial=0))
    names = labels.class_names or tuple(str(c) for c in range(largest + 1))  # ids when the set has no names
    image = sheet_image(item, factor)
    present = set(classes_shown(as_numpy(item["labels"]), len(names)))
    return SamplePicture([image, picture(image, classes, len(names))], [caption(item), "labels"], classes=present)
