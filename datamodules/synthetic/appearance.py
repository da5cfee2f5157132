"""Per-figure outfits (part labels, colours, textures) and their evaluation on the surface.

Textures are functions of primitive-local 3-D coordinates, so patterns stick to the body.
"""

import colorsys
from dataclasses import dataclass

import numpy as np

from .parts import PART_ID
from .sampling import choose

FLAT, STRIPES, CHECKER, NOISE = range(4)

SKIN_TONES = np.array([
    (0.96, 0.80, 0.69), (0.90, 0.72, 0.58), (0.80, 0.60, 0.45),
    (0.64, 0.45, 0.32), (0.45, 0.30, 0.21), (0.30, 0.20, 0.14),
])
HAIR_COLOURS = np.array([
    (0.07, 0.05, 0.04), (0.25, 0.16, 0.09), (0.45, 0.30, 0.16),
    (0.78, 0.65, 0.40), (0.55, 0.24, 0.10), (0.62, 0.62, 0.60),
])


@dataclass(frozen=True)
class Material:
    """Two colours blended by a procedural texture with a given cell size (metres)."""

    colour_a: tuple
    colour_b: tuple
    texture: int = FLAT
    scale: float = 0.05
    axis: int = 1  # stripes run across this primitive-local axis
    seed: int = 0


@dataclass(frozen=True)
class HairStyle:
    """Head-local thresholds (unit-sphere coordinates) of the hair region."""

    material: Material
    top: float  # hair where y > top
    back: float  # ... or where z < back and y > low
    low: float


@dataclass
class Outfit:
    """Class id and material of every primitive part of one figure, plus hair."""

    labels: dict
    materials: dict
    hair: HairStyle | None


def _jitter(rng, colour, amount):
    return tuple(np.clip(np.asarray(colour) + rng.uniform(-amount, amount, 3), 0.0, 1.0))


def random_colour(rng: np.random.Generator) -> tuple:
    """A random RGB colour in [0,1] (uniform hue, varied saturation and value)."""
    hue, saturation, value = rng.random(3) * (1.0, 0.9, 0.8) + (0.0, 0.0, 0.15)
    return colorsys.hsv_to_rgb(float(hue), float(saturation), float(value))


def random_material(rng: np.random.Generator) -> Material:
    """A garment / mannequin material: flat, stripes, checker or blocky noise."""
    texture = choose(rng, (FLAT, STRIPES, CHECKER, NOISE), (0.4, 0.25, 0.1, 0.25))
    colour_a = random_colour(rng)
    colour_b = random_colour(rng) if rng.random() < 0.6 else _jitter(rng, colour_a, 0.25)
    return Material(
        colour_a=colour_a,
        colour_b=colour_b,
        texture=texture,
        scale=float(rng.uniform(0.015, 0.07)),
        axis=int(rng.integers(0, 3)),
        seed=int(rng.integers(0, 2**20)),
    )


def sample_outfit(rng: np.random.Generator, part_names: list) -> Outfit:
    """Random clothing (or a bare mannequin) for the named primitives of one figure."""
    skin_colour = _jitter(rng, SKIN_TONES[rng.integers(len(SKIN_TONES))], 0.04)
    skin = Material(skin_colour, _jitter(rng, skin_colour, 0.04), NOISE, 0.02, 1, int(rng.integers(0, 2**20)))
    mannequin = rng.random() < 0.2
    shirt = not mannequin and rng.random() < 0.75
    sleeves = choose(rng, ("none", "short", "long"), (0.3, 0.4, 0.3)) if shirt else "none"
    pants = not mannequin and rng.random() < 0.8
    long_pants = pants and rng.random() < 0.65
    shoes = not mannequin and rng.random() < 0.7
    top, bottom, footwear = random_material(rng), random_material(rng), random_material(rng)

    labels, materials = {}, {}
    for name in part_names:
        side, _, part = name.partition("_") if name.startswith(("left_", "right_")) else ("", "", name)
        prefix = side.capitalize() + "_"
        if part == "pelvis":
            label, material = ("Lower_Clothing", bottom) if pants else ("Torso", skin)
        elif part in ("abdomen", "chest", "shoulders"):
            label, material = ("Upper_Clothing", top) if shirt else ("Torso", skin)
        elif part in ("neck", "head", "nose"):
            label, material = "Face_Neck", skin
        elif part == "upper_arm":
            label, material = ("Upper_Clothing", top) if sleeves != "none" else (prefix + "Upper_Arm", skin)
        elif part == "forearm":
            label, material = ("Upper_Clothing", top) if sleeves == "long" else (prefix + "Lower_Arm", skin)
        elif part == "hand":
            label, material = prefix + "Hand", skin
        elif part == "thigh":
            label, material = ("Lower_Clothing", bottom) if pants else (prefix + "Upper_Leg", skin)
        elif part == "shank":
            label, material = ("Lower_Clothing", bottom) if long_pants else (prefix + "Lower_Leg", skin)
        elif part == "foot":
            label, material = (prefix + "Shoe", footwear) if shoes else (prefix + "Foot", skin)
        else:
            raise ValueError(f"no outfit rule for primitive part {name!r}")
        if mannequin and part not in ("neck", "head", "nose"):
            material = random_material(rng)  # painted wooden-mannequin look
        labels[name], materials[name] = PART_ID[label], material

    hair = None
    if rng.random() < 0.9:
        colour = _jitter(rng, HAIR_COLOURS[rng.integers(len(HAIR_COLOURS))], 0.04)
        hair_material = Material(colour, _jitter(rng, colour, 0.08), NOISE, 0.012, 1, int(rng.integers(0, 2**20)))
        hair = HairStyle(hair_material, top=float(rng.uniform(0.15, 0.5)),
                         back=float(rng.uniform(-0.35, 0.2)), low=float(rng.uniform(-0.7, -0.1)))
    return Outfit(labels=labels, materials=materials, hair=hair)


def _hash_unit(cells: np.ndarray, seed: np.ndarray) -> np.ndarray:
    """Deterministic pseudo-random value in [0,1) per integer 3-D cell."""
    h = (cells[:, 0] * 73856093) ^ (cells[:, 1] * 19349663) ^ (cells[:, 2] * 83492791) ^ seed
    h = (h ^ (h >> 13)) * 1274126177
    h = h ^ (h >> 16)
    return (h & 0xFFFF) / 65536.0


def texture_weight(local: np.ndarray, texture: np.ndarray, scale: np.ndarray, axis: np.ndarray,
                   seed: np.ndarray) -> np.ndarray:
    """Blend weight between a material's two colours at primitive-local points (metres)."""
    cells = np.floor(local / scale[:, None]).astype(np.int64)
    stripes = (np.take_along_axis(cells, axis[:, None], axis=1)[:, 0] & 1).astype(float)
    checker = (cells.sum(axis=1) & 1).astype(float)
    noise = _hash_unit(cells, seed.astype(np.int64))
    return np.select([texture == STRIPES, texture == CHECKER, texture == NOISE], [stripes, checker, noise], 0.0)
