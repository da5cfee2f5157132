"""Albedo and body-part label of every visible surface point (textures, hair, eyes)."""

from dataclasses import dataclass

import numpy as np

from .appearance import NOISE, Outfit, texture_weight
from .parts import PART_ID

EYE_WHITE = np.array([0.92, 0.92, 0.9])
EYE_DARK = np.array([0.08, 0.06, 0.05])


@dataclass
class SurfaceTable:
    """Per-primitive appearance, gathered by primitive id at shading time."""

    label: np.ndarray  # (n,) class id
    colour_a: np.ndarray  # (n,3)
    colour_b: np.ndarray  # (n,3)
    texture: np.ndarray  # (n,)
    scale: np.ndarray  # (n,)
    axis: np.ndarray  # (n,)
    seed: np.ndarray  # (n,)
    hair: np.ndarray  # (n,) bool: head primitive with a hair region
    hair_rule: np.ndarray  # (n,3) top, back, low thresholds
    hair_a: np.ndarray  # (n,3)
    hair_b: np.ndarray  # (n,3)
    hair_seed: np.ndarray  # (n,)
    eyes: np.ndarray  # (n,2,3) camera-frame eye centres (far away for non-heads)
    eye_radius: np.ndarray  # (n,)


def build_surface_table(figures: list, outfits: list) -> SurfaceTable:
    """Stack the outfits of camera-frame figures in primitive order."""
    rows = []
    for figure, outfit in zip(figures, outfits):
        outfit: Outfit
        eyes = figure.keypoints[1:3]  # COCO left_eye, right_eye
        head_size = figure.primitives.radii[figure.part_names.index("head")]
        for name in figure.part_names:
            material = outfit.materials[name]
            is_head = name == "head"
            hair = outfit.hair if is_head else None
            rows.append((
                outfit.labels[name], material.colour_a, material.colour_b, material.texture, material.scale,
                material.axis, material.seed, hair is not None,
                (hair.top, hair.back, hair.low) if hair else (2.0, -2.0, 2.0),
                hair.material.colour_a if hair else (0, 0, 0), hair.material.colour_b if hair else (0, 0, 0),
                hair.material.seed if hair else 0,
                eyes if is_head else np.full((2, 3), 1e6), 0.2 * head_size[0] if is_head else 0.0,
            ))
    columns = [np.array(column) for column in zip(*rows)]
    return SurfaceTable(*columns)


def paint(table: SurfaceTable, ids: np.ndarray, local: np.ndarray, radii: np.ndarray, points: np.ndarray) -> tuple:
    """Albedo (m,3) in [0,1] and class ids (m,) for surface points of primitives ``ids``."""
    weight = texture_weight(local, table.texture[ids], table.scale[ids], table.axis[ids], table.seed[ids])
    colour_a = table.colour_a[ids]
    albedo = colour_a + weight[:, None] * (table.colour_b[ids] - colour_a)
    labels = table.label[ids].astype(np.uint8)

    head = np.nonzero(table.hair[ids] | (table.eye_radius[ids] > 0))[0]
    if len(head):
        head_ids = ids[head]
        unit = local[head] / radii[head]
        top, back, low = table.hair_rule[head_ids].T
        is_hair = table.hair[head_ids] & ((unit[:, 1] > top) | ((unit[:, 2] < back) & (unit[:, 1] > low)))
        hair_weight = texture_weight(local[head], np.full(len(head), NOISE), np.full(len(head), 0.012),
                                     np.ones(len(head), int), table.hair_seed[head_ids])
        hair_a = table.hair_a[head_ids]
        hair_colour = hair_a + hair_weight[:, None] * (table.hair_b[head_ids] - hair_a)
        albedo[head] = np.where(is_hair[:, None], hair_colour, albedo[head])
        labels[head] = np.where(is_hair, PART_ID["Hair"], labels[head])

        eye_distance = np.linalg.norm(points[head, None, :] - table.eyes[head_ids], axis=2).min(axis=1)
        radius = table.eye_radius[head_ids]
        eye_colour = np.where((eye_distance < 0.55 * radius)[:, None], EYE_DARK, EYE_WHITE)
        albedo[head] = np.where(((eye_distance < radius) & ~is_hair)[:, None], eye_colour, albedo[head])
    return albedo, labels
