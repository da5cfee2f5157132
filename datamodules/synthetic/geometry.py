"""Small rotation helpers (right-handed, angles in radians), written for 3-vectors."""

import math

import numpy as np


def rot_x(angle: float) -> np.ndarray:
    """Rotation about the x axis."""
    c, s = math.cos(angle), math.sin(angle)
    return np.array([[1.0, 0.0, 0.0], [0.0, c, -s], [0.0, s, c]])


def rot_y(angle: float) -> np.ndarray:
    """Rotation about the y axis."""
    c, s = math.cos(angle), math.sin(angle)
    return np.array([[c, 0.0, s], [0.0, 1.0, 0.0], [-s, 0.0, c]])


def rot_z(angle: float) -> np.ndarray:
    """Rotation about the z axis."""
    c, s = math.cos(angle), math.sin(angle)
    return np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])


def cross(a, b) -> np.ndarray:
    """Cross product of two 3-vectors."""
    return np.array([a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]])


def norm(a) -> float:
    """Euclidean length of a 3-vector."""
    return math.sqrt(a[0] * a[0] + a[1] * a[1] + a[2] * a[2])


def rot_axis(axis, angle: float) -> np.ndarray:
    """Rotation by ``angle`` about ``axis`` (Rodrigues); identity for a zero axis."""
    length = norm(axis)
    if length < 1e-12:
        return np.eye(3)
    x, y, z = (float(v) / length for v in axis)
    c, s = math.cos(angle), math.sin(angle)
    t = 1.0 - c
    return np.array([
        [c + t * x * x, t * x * y - s * z, t * x * z + s * y],
        [t * x * y + s * z, c + t * y * y, t * y * z - s * x],
        [t * x * z - s * y, t * y * z + s * x, c + t * z * z],
    ])


def frame_from_axis(axis, hint) -> np.ndarray:
    """Proper rotation whose second column is ``axis``; first column lies near ``hint``."""
    y = np.asarray(axis, dtype=float) / norm(axis)
    x = np.asarray(hint, dtype=float) - float(np.dot(hint, y)) * y
    if norm(x) < 1e-6:
        helper = np.array([1.0, 0.0, 0.0]) if abs(y[0]) < 0.9 else np.array([0.0, 0.0, 1.0])
        x = helper - float(np.dot(helper, y)) * y
    x = x / norm(x)
    return np.stack([x, y, cross(x, y)], axis=1)
