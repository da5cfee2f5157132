"""Ray casting of stretched capsules: z-buffer, primitive ids, normals, supersampled alpha.

Rays leave the camera centre with direction (dx, dy, 1), so the ray parameter of a hit
equals its z-depth.  Each primitive is only cast inside its projected pixel window.
"""

import cv2
import numpy as np

from .camera import box_to_pixels, ray_directions
from .primitives import Primitives

NEAR = 0.05


def hit_depth(prims: Primitives, k: int, dx, dy) -> np.ndarray:
    """Depth of the first hit of rays (dx, dy, 1) with primitive ``k``; ``inf`` where missed.

    Works in the primitive's scaled local frame, where it is a unit-radius capsule.
    """
    r, radii, origin = prims.rotation[k], prims.radii[k], prims.origin[k]
    ox, oy, oz = -(origin @ r) / radii  # camera centre, scaled local frame
    ax, ay, az = (r / radii).T  # row i maps a camera direction to scaled local axis i
    lx = ax[0] * dx + (ax[1] * dy + ax[2])  # bracketed: cheap when dx, dy are a row and a column
    ly = ay[0] * dx + (ay[1] * dy + ay[2])
    lz = az[0] * dx + (az[1] * dy + az[2])
    length = prims.length[k] / radii[1]
    a = lx * lx + lz * lz
    b = ox * lx + oz * lz
    c = ox * ox + oz * oz - 1.0
    with np.errstate(invalid="ignore", divide="ignore"):
        if length > 0:
            disc = b * b - a * c
            t_side = (-b - np.sqrt(disc)) / a
            y = oy + t_side * ly
            side = (disc >= 0) & (y >= 0) & (y <= length)
            # Off the straight part the first hit can only be on the nearer end cap.
            cap_y = oy - np.where(y > length, length, 0.0)
        else:
            side, cap_y = False, oy
        a2 = a + ly * ly
        b2 = b + cap_y * ly
        disc2 = b2 * b2 - a2 * (c + cap_y * cap_y)
        t = np.where(disc2 >= 0, (-b2 - np.sqrt(disc2)) / a2, np.inf)
        if length > 0:
            t = np.where(side, t_side, t)
    return np.where(t > NEAR, t, np.inf)


def pixel_windows(prims: Primitives, K: np.ndarray, height: int, width: int) -> np.ndarray:
    """(n,4) pixel windows x0, y0, x1, y1 that contain each primitive's projection."""
    low, high = prims.bounds()
    return box_to_pixels(K, low, high, height, width)


def rasterize(prims: Primitives, K: np.ndarray, height: int, width: int, windows: np.ndarray) -> tuple:
    """Z-buffer pass: returns depth (HxW float64, inf = empty) and primitive id (HxW int32, -1 = empty)."""
    depth = np.full((height, width), np.inf)
    ids = np.full((height, width), -1, dtype=np.int32)
    dx_all, dy_all = ray_directions(K, np.arange(width, dtype=float), np.arange(height, dtype=float))
    for k, (x0, y0, x1, y1) in enumerate(windows):
        if x1 <= x0 or y1 <= y0:
            continue
        t = hit_depth(prims, k, dx_all[None, x0:x1], dy_all[y0:y1, None])
        depth_window = depth[y0:y1, x0:x1]
        closer = t < depth_window
        np.copyto(depth_window, t, where=closer)
        np.copyto(ids[y0:y1, x0:x1], k, where=closer)
    return depth, ids


def surface_frames(prims: Primitives, ids: np.ndarray, points: np.ndarray) -> tuple:
    """Outward unit normals (camera frame) and primitive-local coordinates (metres) of surface points."""
    rotation = prims.rotation[ids]
    local = np.einsum("nji,nj->ni", rotation, points - prims.origin[ids])
    radii = prims.radii[ids]
    scaled = local / radii
    scaled[:, 1] -= np.clip(scaled[:, 1], 0.0, prims.length[ids] / radii[:, 1])
    normals = np.einsum("nij,nj->ni", rotation, scaled / radii)  # gradient of the implicit surface
    normals /= np.linalg.norm(normals, axis=1, keepdims=True)
    return normals, local


def edge_band(mask: np.ndarray) -> np.ndarray:
    """Pixels within one pixel of the silhouette boundary (both sides)."""
    kernel = np.ones((3, 3), np.uint8)
    m = mask.astype(np.uint8)
    return cv2.dilate(m, kernel) != cv2.erode(m, kernel)


def coverage_alpha(prims: Primitives, K: np.ndarray, mask: np.ndarray, windows: np.ndarray,
                   samples: int = 4) -> np.ndarray:
    """Alpha in [0,1]: ``samples`` x ``samples`` sub-pixel coverage near silhouette edges, mask elsewhere."""
    height, width = mask.shape
    alpha = mask.astype(np.float32)
    rows, cols = np.nonzero(edge_band(mask))
    if len(rows) == 0:
        return alpha
    offsets = (np.arange(samples) + 0.5) / samples - 0.5
    off_v, off_u = np.meshgrid(offsets, offsets, indexing="ij")
    sub_dx, sub_dy = ray_directions(K, cols[:, None] + off_u.ravel(), rows[:, None] + off_v.ravel())
    band_index = np.full((height, width), -1, dtype=np.int64)
    band_index[rows, cols] = np.arange(len(rows))
    covered = np.zeros(sub_dx.shape, dtype=bool)
    for k, (x0, y0, x1, y1) in enumerate(windows):
        if x1 <= x0 or y1 <= y0:
            continue
        selected = band_index[y0:y1, x0:x1]
        selected = selected[selected >= 0]
        if len(selected) == 0:
            continue
        covered[selected] |= np.isfinite(hit_depth(prims, k, sub_dx[selected], sub_dy[selected]))
    coverage = covered.mean(axis=1)
    # A covered pixel centre counts as some coverage even if no sub-sample hit the sliver.
    alpha[rows, cols] = np.where(mask[rows, cols], np.maximum(coverage, 1.0 / samples**2), coverage)
    return alpha
