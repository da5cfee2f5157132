"""Stretched capsules stored as parallel arrays (one row per primitive).

A primitive is the set of points whose distance to a segment is at most 1 after scaling
its local frame by ``1 / radii``: a capsule with elliptical cross-section (``radii``
x, z) and half-ellipsoid caps (``radii`` y) around the segment from ``origin`` along local
+Y of length ``length``.  Length 0 gives an ellipsoid; equal radii give a round capsule.
"""

from dataclasses import dataclass

import numpy as np

from .geometry import frame_from_axis, norm


@dataclass
class Primitives:
    """``origin`` (n,3), ``rotation`` (n,3,3; columns = local axes), ``radii`` (n,3), ``length`` (n,)."""

    origin: np.ndarray
    rotation: np.ndarray
    radii: np.ndarray
    length: np.ndarray

    def __len__(self) -> int:
        return len(self.length)

    @staticmethod
    def build(rows: list) -> "Primitives":
        """Stack ``(origin, rotation, radii, length)`` rows."""
        origins, rotations, radii, lengths = zip(*rows)
        return Primitives(*(np.array(column, float) for column in (origins, rotations, radii, lengths)))

    @staticmethod
    def concat(parts: list) -> "Primitives":
        fields = ("origin", "rotation", "radii", "length")
        return Primitives(*(np.concatenate([getattr(p, name) for p in parts]) for name in fields))

    def transformed(self, rotation: np.ndarray, translation: np.ndarray) -> "Primitives":
        """Apply the rigid transform ``x -> rotation @ x + translation``."""
        return Primitives(
            origin=self.origin @ rotation.T + translation,
            rotation=np.einsum("ij,njk->nik", rotation, self.rotation),
            radii=self.radii.copy(),
            length=self.length.copy(),
        )

    def bounds(self) -> tuple:
        """Axis-aligned 3-D boxes ``(low, high)``, each (n,3)."""
        half = np.sqrt(np.einsum("nij,nj->ni", self.rotation**2, self.radii**2))
        end = self.origin + self.rotation[:, :, 1] * self.length[:, None]
        return np.minimum(self.origin, end) - half, np.maximum(self.origin, end) + half


def capsule(start, end, radii, hint=(1.0, 0.0, 0.0)) -> tuple:
    """Row for a capsule around the segment ``start``-``end``.

    ``radii`` is one radius or (x, cap, z) radii; the surface reaches ``radii[1]`` beyond
    both end points.  ``hint`` orients the local x axis (cross-section and texture frame).
    """
    start, end = np.asarray(start, float), np.asarray(end, float)
    radii = (radii, radii, radii) if np.isscalar(radii) else tuple(radii)
    axis = end - start
    length = norm(axis)
    if length < 1e-9:
        axis, length = np.array([0.0, 1.0, 0.0]), 0.0
    return start, frame_from_axis(axis, np.asarray(hint, float)), radii, length


def ellipsoid(center, rotation, radii) -> tuple:
    """Row for an ellipsoid."""
    return np.asarray(center, float), np.asarray(rotation, float), tuple(radii), 0.0
