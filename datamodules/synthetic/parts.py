"""Label tables shared by the synthetic generator and its readers.

``SAPIENS2_PART_CLASSES`` is the Sapiens2 29-class body-part taxonomy (index = class
id, 0 = background).  ``COCO_KEYPOINT_NAMES`` / ``COCO_SKELETON`` are the COCO-17
keypoint order and its 1-based limb pairs; ``KEYPOINT_NAMES`` / ``SKELETON`` add the feet, as
stored in the COCO ``categories`` entry of a rendered dataset.
"""

from datamodules.body_parts import SAPIENS2_PART_CLASSES  # noqa: E402  (one source for the taxonomy)

PART_ID = {name: class_id for class_id, name in enumerate(SAPIENS2_PART_CLASSES)}

COCO_KEYPOINT_NAMES = (
    "nose",
    "left_eye",
    "right_eye",
    "left_ear",
    "right_ear",
    "left_shoulder",
    "right_shoulder",
    "left_elbow",
    "right_elbow",
    "left_wrist",
    "right_wrist",
    "left_hip",
    "right_hip",
    "left_knee",
    "right_knee",
    "left_ankle",
    "right_ankle",
)

COCO_SKELETON = (
    (16, 14), (14, 12), (17, 15), (15, 13), (12, 13), (6, 12), (7, 13), (6, 7), (6, 8),
    (7, 9), (8, 10), (9, 11), (2, 3), (1, 2), (1, 3), (2, 4), (3, 5), (4, 6), (5, 7),
)

# What the annotations hold: COCO-17, then each heel and the tip of each foot (the built-in set ``coco17_feet``).
FOOT_KEYPOINT_NAMES = ("left_heel", "right_heel", "left_toe", "right_toe")
KEYPOINT_NAMES = COCO_KEYPOINT_NAMES + FOOT_KEYPOINT_NAMES
KEYPOINT_INDEX = {name: i for i, name in enumerate(KEYPOINT_NAMES)}
SKELETON = COCO_SKELETON + ((16, 18), (16, 20), (18, 20), (17, 19), (17, 21), (19, 21))  # 1-based, as COCO's
