"""Turn a posed skeleton into primitives plus keypoints (COCO-17 and the feet) with visibility hints."""

from dataclasses import dataclass

import numpy as np

from .geometry import norm, rot_x
from .parts import KEYPOINT_NAMES
from .primitives import Primitives, capsule, ellipsoid
from .skeleton import SIDES, BodyShape, Skeleton

# Unit directions (head-local, before scaling by the head radii) of the face keypoints.
FACE_POINTS = {
    "left_eye": (0.33, 0.12, 0.93),
    "right_eye": (-0.33, 0.12, 0.93),
    "left_ear": (0.96, 0.0, 0.28),
    "right_ear": (-0.96, 0.0, 0.28),
}
NOSE_DIRECTION = (0.0, -0.22, 1.0)


@dataclass
class Figure:
    """Primitives and keypoints of one figure, in whatever frame they were last moved to.

    ``keypoint_normals`` are outward surface normals for the face keypoints (zero for body
    joints).  ``keypoint_reach`` (17, n_primitives, 2) holds, for the primitives whose
    surface may show a keypoint, ``(slack, radius)`` in metres: their surface may lie up to
    ``slack + radius / sin(angle between the primitive axis and the line of sight)`` in
    front of the keypoint and still show it (so a limb seen end-on hides the joint behind
    it); NaN for all other primitives.
    """

    primitives: Primitives
    part_names: list
    keypoints: np.ndarray
    keypoint_normals: np.ndarray
    keypoint_reach: np.ndarray

    def transformed(self, rotation: np.ndarray, translation: np.ndarray) -> "Figure":
        return Figure(
            primitives=self.primitives.transformed(rotation, translation),
            part_names=self.part_names,
            keypoints=self.keypoints @ rotation.T + translation,
            keypoint_normals=self.keypoint_normals @ rotation.T,
            keypoint_reach=self.keypoint_reach,
        )


def _head_surface(center, rotation, radii, direction):
    """Point on the head ellipsoid along a head-local direction, and its outward normal."""
    unit = np.asarray(direction, float) / norm(direction)
    radii = np.asarray(radii)
    point = center + rotation @ (radii * unit)
    normal = rotation @ (unit / radii)
    return point, normal / norm(normal)


def build_figure(skeleton: Skeleton) -> Figure:
    """Primitives (body frame) for a posed skeleton, plus keypoints and visibility hints."""
    shape, j = skeleton.shape, skeleton.joints
    s = shape.stature
    rows, names = [], []

    def add(name, row):
        names.append(name)
        rows.append(row)

    def trunk(name, frame, bottom, top, radii):
        add(name, capsule(j["waist"] + frame @ [0.0, bottom * s, -0.005 * s],
                          j["waist"] + frame @ [0.0, top * s, -0.005 * s], radii, frame[:, 0]))

    trunk("pelvis", np.eye(3), -shape.waist_height / s - 0.005, -shape.waist_height / s + 0.045, shape.pelvis_radii)
    trunk("abdomen", skeleton.mid_body, -0.03, 0.05, shape.abdomen_radii)
    trunk("chest", skeleton.upper_body, 0.075, 0.155, shape.chest_radii)
    shoulder_radius = 1.15 * shape.upper_arm_radius
    add("shoulders", capsule(j["right_shoulder"], j["left_shoulder"], shoulder_radius, skeleton.upper_body[:, 2]))
    add("neck", capsule(j["neck_base"], j["neck_top"], shape.neck_radius, skeleton.upper_body[:, 2]))
    add("head", ellipsoid(j["head"], skeleton.head, shape.head_radii))
    nose_base, _ = _head_surface(j["head"], skeleton.head, shape.head_radii, NOSE_DIRECTION)
    nose_radii = (0.010 * s, 0.016 * s, 0.012 * s)
    nose_frame = skeleton.head @ rot_x(-0.35)
    add("nose", ellipsoid(nose_base, nose_frame, nose_radii))

    limbs = (  # part, start joint, end joint, radii, frame orienting the cross-section
        ("upper_arm", "shoulder", "elbow", shape.upper_arm_radius, "upper_arm"),
        ("forearm", "elbow", "wrist", shape.forearm_radius, "forearm"),
        ("hand", "wrist", "hand_end", shape.hand_radii, "hand"),
        ("thigh", "hip", "knee", shape.thigh_radius, "thigh"),
        ("shank", "knee", "ankle", shape.shank_radius, "shank"),
        ("foot", "heel", "toe", shape.foot_radii, "shank"),
    )
    for side in SIDES:
        for part, start, end, radii, frame in limbs:
            hint = skeleton.limb_frames[f"{side}_{frame}"][:, 0]
            add(f"{side}_{part}", capsule(j[f"{side}_{start}"], j[f"{side}_{end}"], radii, hint))

    index = {name: i for i, name in enumerate(names)}
    count = len(KEYPOINT_NAMES)
    keypoints, normals = np.zeros((count, 3)), np.zeros((count, 3))
    reach = np.full((count, len(names), 2), np.nan)
    for k, name in enumerate(KEYPOINT_NAMES):
        if name == "nose":
            keypoints[k] = nose_base + nose_frame @ np.array([0.0, 0.0, nose_radii[2]])
            normals[k] = skeleton.head[:, 2]
            around = {"head": (0.012 * s, 0.0), "nose": (0.012 * s, 0.0)}
        elif name in FACE_POINTS:
            keypoints[k], normals[k] = _head_surface(j["head"], skeleton.head, shape.head_radii, FACE_POINTS[name])
            around = {"head": (0.012 * s, 0.0), "nose": (0.012 * s, 0.0)}
        else:
            keypoints[k] = j[name]
            around = _joint_reach(shape, *name.split("_"), shoulder_radius)
        for part, slack_radius in around.items():
            reach[k, index[part]] = slack_radius
    return Figure(
        primitives=Primitives.build(rows),
        part_names=names,
        keypoints=keypoints,
        keypoint_normals=normals,
        keypoint_reach=reach,
    )


def _joint_reach(shape: BodyShape, side: str, joint: str, shoulder_radius: float) -> dict:
    """Primitives around a body joint with their ``(slack, radius)`` reach (see ``Figure``).

    About a limb radius for the limbs meeting at the joint; a hand or foot pointing at the
    camera may cover its wrist or ankle over its whole length and still counts as showing it.
    """
    def limb(radius):
        return 0.01, 1.2 * radius

    if joint == "shoulder":
        return {part: limb(shoulder_radius) for part in (f"{side}_upper_arm", "shoulders", "chest")}
    if joint == "elbow":
        return {part: limb(shape.upper_arm_radius) for part in (f"{side}_upper_arm", f"{side}_forearm")}
    if joint == "wrist":
        hand_reach = shape.hand + shape.hand_radii[1] + 0.01
        return {f"{side}_forearm": limb(shape.forearm_radius), f"{side}_hand": (hand_reach, 0.0)}
    if joint == "hip":
        radius = max(shape.thigh_radius, shape.pelvis_radii[2])
        return {f"{side}_thigh": limb(radius), "pelvis": limb(radius)}
    if joint == "knee":
        return {f"{side}_thigh": limb(shape.thigh_radius), f"{side}_shank": limb(shape.thigh_radius)}
    if joint == "ankle":
        return {f"{side}_shank": limb(shape.shank_radius), f"{side}_foot": (0.8 * shape.foot + 0.01, 0.0)}
    if joint in ("heel", "toe"):  # the ends of the foot's capsule (the heel also meets the shank)
        reach = {f"{side}_foot": limb(max(shape.foot_radii))}
        return {**reach, f"{side}_shank": limb(shape.shank_radius)} if joint == "heel" else reach
    raise ValueError(f"unknown joint {side}_{joint}")
