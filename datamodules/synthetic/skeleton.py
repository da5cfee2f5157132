"""Procedural 3-D figure: random body proportions, random poses, forward kinematics.

Body frame (metres, right-handed): origin between the hip joints, X = the figure's own
left, Y = up, Z = the direction the figure faces.  Limb angles follow one convention for
both sides; the right side is the mirror image (X -> -X) of the left.
"""

from dataclasses import dataclass, field

import numpy as np

from .geometry import cross, rot_axis, rot_x, rot_y, rot_z
from .sampling import choose

SIDES = {"left": 1.0, "right": -1.0}
DOWN = np.array([0.0, -1.0, 0.0])


@dataclass(frozen=True)
class BodyShape:
    """Segment lengths and thicknesses of one figure, in metres."""

    stature: float
    hip_half_width: float
    shoulder_half_width: float
    waist_height: float
    shoulder_height: float
    neck_base_height: float
    neck_length: float
    upper_arm: float
    forearm: float
    hand: float
    thigh: float
    shank: float
    foot: float
    upper_arm_radius: float
    forearm_radius: float
    hand_radii: tuple  # thickness, cap, width
    thigh_radius: float
    shank_radius: float
    foot_radii: tuple  # half-width, cap, half-height
    neck_radius: float
    head_radii: tuple
    chest_radii: tuple  # half-width, cap, half-depth
    abdomen_radii: tuple
    pelvis_radii: tuple


@dataclass(frozen=True)
class LimbAngles:
    """Angles (radians) of one arm or leg: swing direction, twist, middle-joint flex."""

    elevation: float  # 0 = hanging straight down, pi = straight up
    azimuth: float  # 0 = swing forward, pi/2 = sideways (outwards), pi = backwards
    twist: float  # rotation of the bend plane about the upper segment
    flex: float  # elbow / knee flexion, 0 = straight
    end_flex: float  # wrist / ankle flexion
    toe_out: float = 0.0  # feet only: outward yaw


@dataclass(frozen=True)
class Pose:
    """Full-body pose: torso and neck angles plus one ``LimbAngles`` per limb."""

    torso_bend: float
    torso_side: float
    torso_twist: float
    neck_flex: float
    neck_side: float
    neck_turn: float
    arms: dict = field(default_factory=dict)  # side -> LimbAngles
    legs: dict = field(default_factory=dict)  # side -> LimbAngles


@dataclass
class Skeleton:
    """Posed joint positions (body frame) plus the frames the primitives need."""

    shape: BodyShape
    joints: dict  # name -> (3,) position
    upper_body: np.ndarray  # rotation of chest/shoulders
    mid_body: np.ndarray  # rotation of the abdomen (half of the upper-body rotation)
    head: np.ndarray  # rotation of the head
    limb_frames: dict  # segment name -> rotation whose -Y column points along the segment


def sample_body_shape(rng: np.random.Generator) -> BodyShape:
    """Random adult proportions (stature 1.45-1.95 m) and build."""
    stature = rng.uniform(1.45, 1.95)
    build = rng.uniform(0.8, 1.3)
    girth = rng.uniform(0.85, 1.25)

    def length(ratio):
        return float(ratio * stature * rng.uniform(0.93, 1.07))

    def thick(ratio, factor=build):
        return float(ratio * stature * factor * rng.uniform(0.93, 1.07))

    return BodyShape(
        stature=float(stature),
        hip_half_width=length(0.052),
        shoulder_half_width=length(0.112),
        waist_height=length(0.10),
        shoulder_height=length(0.175),
        neck_base_height=length(0.20),
        neck_length=length(0.055),
        upper_arm=length(0.172),
        forearm=length(0.150),
        hand=length(0.075),
        thigh=length(0.245),
        shank=length(0.240),
        foot=length(0.125),
        upper_arm_radius=thick(0.024),
        forearm_radius=thick(0.019),
        hand_radii=(thick(0.010, 1.0), thick(0.014, 1.0), thick(0.021, 1.0)),
        thigh_radius=thick(0.040),
        shank_radius=thick(0.028),
        foot_radii=(thick(0.024, 1.0), thick(0.020, 1.0), thick(0.017, 1.0)),
        neck_radius=thick(0.030),
        head_radii=(thick(0.047, 1.0), thick(0.065, 1.0), thick(0.057, 1.0)),
        chest_radii=(thick(0.098, girth), length(0.05), thick(0.062, girth)),
        abdomen_radii=(thick(0.082, girth), length(0.045), thick(0.056, girth)),
        pelvis_radii=(thick(0.090, girth), length(0.05), thick(0.060, girth)),
    )


def _deg(rng, low, high):
    return float(np.deg2rad(rng.uniform(low, high)))


def _arm(rng, mode, swing_back=False):
    if mode == "relaxed":
        elevation, azimuth = rng.uniform(0, 35), rng.uniform(-10, 100)
        flex = rng.uniform(0, 70)
    elif mode == "walk":
        elevation, azimuth = rng.uniform(5, 30), (rng.uniform(165, 180) if swing_back else rng.uniform(-10, 10))
        flex = rng.uniform(5, 50)
    elif mode == "rest":
        elevation, azimuth = rng.uniform(10, 60), rng.uniform(-20, 60)
        flex = rng.uniform(30, 110)
    else:  # free movement within the shoulder's range
        azimuth = rng.uniform(-30, 180)
        max_elevation = 60 if azimuth > 110 else (110 if azimuth < 0 else 170)
        elevation = rng.uniform(0, max_elevation)
        flex = rng.uniform(0, 145)
    return LimbAngles(
        elevation=float(np.deg2rad(elevation)),
        azimuth=float(np.deg2rad(azimuth)),
        twist=_deg(rng, -60, 60),
        flex=float(np.deg2rad(flex)),
        end_flex=_deg(rng, -30, 40),
    )


def _leg(rng, mode, swing_back=False):
    ankle = rng.uniform(-10, 15)
    if mode == "stand":
        elevation, azimuth, flex = rng.uniform(0, 12), rng.uniform(40, 120), rng.uniform(0, 15)
    elif mode == "walk":
        if swing_back:
            elevation, azimuth, flex = rng.uniform(5, 25), rng.uniform(165, 180), rng.uniform(10, 50)
            ankle = rng.uniform(10, 30)
        else:
            elevation, azimuth, flex = rng.uniform(10, 30), rng.uniform(-10, 10), rng.uniform(0, 25)
    elif mode == "sit":
        elevation, azimuth, flex = rng.uniform(70, 100), rng.uniform(-10, 30), rng.uniform(70, 110)
    elif mode == "crouch":
        elevation, azimuth, flex = rng.uniform(60, 120), rng.uniform(-10, 40), rng.uniform(100, 145)
    else:  # free movement within the hip's range
        azimuth = rng.uniform(-20, 180)
        max_elevation = 30 if azimuth > 120 else (45 if azimuth > 60 else 110)
        elevation, flex = rng.uniform(0, max_elevation), rng.uniform(0, 140)
    return LimbAngles(
        elevation=float(np.deg2rad(elevation)),
        azimuth=float(np.deg2rad(azimuth)),
        twist=_deg(rng, -15, 15),
        flex=float(np.deg2rad(flex)),
        end_flex=float(np.deg2rad(ankle)),
        toe_out=_deg(rng, 0, 25),
    )


def sample_pose(rng: np.random.Generator) -> Pose:
    """Random pose: standing, walking, sitting-ish, crouching or free limb movement."""
    leg_mode = choose(rng, ("stand", "walk", "sit", "crouch", "free"), (0.38, 0.25, 0.15, 0.07, 0.15))
    if leg_mode == "walk":
        arm_mode = "walk" if rng.random() < 0.7 else "free"
    elif leg_mode == "sit":
        arm_mode = choose(rng, ("rest", "relaxed", "free"), (0.5, 0.2, 0.3))
    else:
        arm_mode = "relaxed" if rng.random() < 0.5 else "free"
    left_leg_back = bool(rng.random() < 0.5)
    legs = {
        "left": _leg(rng, leg_mode, swing_back=left_leg_back),
        "right": _leg(rng, leg_mode, swing_back=not left_leg_back),
    }
    # When walking, each arm swings opposite to the leg on its side.
    arms = {
        "left": _arm(rng, arm_mode, swing_back=not left_leg_back),
        "right": _arm(rng, arm_mode, swing_back=left_leg_back),
    }
    free = leg_mode == "free" or arm_mode == "free"
    bend_range = (-15, 40) if free else ((-10, 25) if leg_mode in ("sit", "crouch") else (-5, 12))
    return Pose(
        torso_bend=_deg(rng, *bend_range),
        torso_side=_deg(rng, -20, 20) if free else _deg(rng, -6, 6),
        torso_twist=_deg(rng, -35, 35) if free else _deg(rng, -12, 12),
        neck_flex=_deg(rng, -20, 35),
        neck_side=_deg(rng, -15, 15),
        neck_turn=_deg(rng, -60, 60),
        arms=arms,
        legs=legs,
    )


def _swing(angles: LimbAngles, side: float) -> np.ndarray:
    """Local rotation of a limb's upper segment from the hanging rest direction."""
    axis = np.array([-np.cos(angles.azimuth), 0.0, side * np.sin(angles.azimuth)])
    swing = rot_axis(axis, angles.elevation)
    return rot_axis(swing @ DOWN, side * angles.twist) @ swing


def _chain(root, parent, angles, side, rest_bend, upper_len, lower_len):
    """Two-segment limb: returns (middle joint, end joint, upper frame, lower frame)."""
    upper_frame = parent @ _swing(angles, side)
    upper_dir = upper_frame @ DOWN
    middle = root + upper_len * upper_dir
    bend_axis = cross(upper_dir, upper_frame @ rest_bend)
    lower_frame = rot_axis(bend_axis, angles.flex) @ upper_frame
    end = middle + lower_len * (lower_frame @ DOWN)
    return middle, end, upper_frame, lower_frame


def pose_skeleton(shape: BodyShape, pose: Pose) -> Skeleton:
    """Forward kinematics: joint positions and segment frames in the body frame."""
    s = shape.stature
    upper_body = rot_y(pose.torso_twist) @ rot_x(pose.torso_bend) @ rot_z(pose.torso_side)
    mid_body = rot_y(pose.torso_twist / 2) @ rot_x(pose.torso_bend / 2) @ rot_z(pose.torso_side / 2)
    head = upper_body @ rot_y(pose.neck_turn) @ rot_x(pose.neck_flex) @ rot_z(pose.neck_side)

    joints = {"pelvis": np.zeros(3)}
    waist = np.array([0.0, shape.waist_height, 0.0])
    joints["waist"] = waist
    joints["neck_base"] = waist + upper_body @ np.array([0.0, shape.neck_base_height, -0.005 * s])
    neck_dir = upper_body @ rot_x(pose.neck_flex / 2) @ np.array([0.0, 1.0, 0.0])
    joints["neck_top"] = joints["neck_base"] + shape.neck_length * neck_dir
    rx, ry, rz = shape.head_radii
    joints["head"] = joints["neck_top"] + head @ np.array([0.0, 0.6 * ry, 0.15 * rz])

    limb_frames = {}
    for side_name, side in SIDES.items():
        shoulder = waist + upper_body @ np.array([side * shape.shoulder_half_width, shape.shoulder_height, -0.01 * s])
        arm = pose.arms[side_name]
        elbow, wrist, upper_arm, forearm = _chain(
            shoulder, upper_body, arm, side, np.array([0.0, 0.0, 1.0]), shape.upper_arm, shape.forearm
        )
        hand_frame = forearm @ rot_x(-arm.end_flex)
        hand_end = wrist + shape.hand * (hand_frame @ DOWN)

        hip = np.array([side * shape.hip_half_width, 0.0, 0.0])
        leg = pose.legs[side_name]
        backward = np.array([0.0, 0.0, -1.0])
        knee, ankle, thigh, shank = _chain(hip, np.eye(3), leg, side, backward, shape.thigh, shape.shank)
        foot_dir = shank @ rot_y(side * leg.toe_out) @ np.array([0.0, -np.sin(leg.end_flex), np.cos(leg.end_flex)])
        heel = ankle + 0.6 * shape.foot_radii[2] * (shank @ DOWN) - 0.25 * shape.foot * foot_dir
        toe = heel + shape.foot * foot_dir

        joints.update({
            f"{side_name}_shoulder": shoulder, f"{side_name}_elbow": elbow, f"{side_name}_wrist": wrist,
            f"{side_name}_hand_end": hand_end, f"{side_name}_hip": hip, f"{side_name}_knee": knee,
            f"{side_name}_ankle": ankle, f"{side_name}_heel": heel, f"{side_name}_toe": toe,
        })
        limb_frames.update({
            f"{side_name}_upper_arm": upper_arm, f"{side_name}_forearm": forearm, f"{side_name}_hand": hand_frame,
            f"{side_name}_thigh": thigh, f"{side_name}_shank": shank,
        })
    return Skeleton(shape=shape, joints=joints, upper_body=upper_body, mid_body=mid_body, head=head,
                    limb_frames=limb_frames)
