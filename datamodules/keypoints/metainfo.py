"""Keypoint sets as data: names, flip pairs, OKS sigmas, skeleton, body halves, evaluation groups.

A keypoint set is one YAML file::

    name: my_set
    keypoints: [nose, left_eye, right_eye, ...]   # order = heatmap channel order
    sigmas: [0.026, 0.025, ...]                    # OKS sigma per keypoint
    skeleton: [[left_eye, right_eye], ...]         # links by name (for drawing)
    upper_body: [...]                               # half-body augmentation
    lower_body: [...]
    swap: {left_big_toe: right_big_toe}             # optional: pairs not named left_*/right_*
    groups: {body: [nose, ...], hand: [...]}        # optional: OKS AP per group at validation (AP_<group>);
                                                    # a set's name as a group: its keypoints (body: coco17)

A set may ``extends: coco17`` (a built-in name, or a YAML file in the folder of the set that names it, or below
it): the base's keypoints and every field come first, the file lists only what it adds. A set named in
``groups`` follows the same rule; a chain of sets that comes back to one of them is an error naming the files.

Flip pairs are derived from a ``left``/``right`` word in the names (``left_eye`` <-> ``right_eye``,
``Left_Hand`` <-> ``Right_Hand``); ``l_hand`` or ``cleft_chin`` are not matched: use ``swap`` for such names.
Group names are letters, digits and ``_`` (they become metric names). Built-in sets live beside this file in
``datamodules/keypoints/`` and are referred to by name: ``coco17``, ``coco_wholebody`` (133) and ``sapiens2_308``
(the released Sapiens2 pose heads; data from the Sapiens2 code under its licence, ``LICENSE-sapiens2.md`` here).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import yaml

from datamodules.boundary.files import read_yaml
from datamodules.boundary.folders import inside
from datamodules.errors import BadInput, DataError

BUILTIN_DIR = Path(__file__).parent
SET_FILE = "keypoints.yaml"  # the name a keypoint set travels under beside an exported pose model


class MetainfoError(BadInput):
    """A keypoint metainfo file is malformed; the message names the file and field."""


@dataclass(frozen=True)
class KeypointMetainfo:
    name: str
    keypoint_names: tuple[str, ...]
    sigmas: tuple[float, ...]
    skeleton: tuple[tuple[int, int], ...]
    flip_indices: tuple[int, ...]  # flip_indices[k] = index of k's mirror partner (k itself if none)
    upper_body_ids: tuple[int, ...]
    lower_body_ids: tuple[int, ...]
    source: str
    groups: tuple[tuple[str, tuple[int, ...]], ...] = ()  # (group name, keypoint indices), in file order

    @property
    def num_keypoints(self) -> int:
        return len(self.keypoint_names)

    @property
    def flip_pairs(self) -> list[list[int]]:
        """Mirror pairs ``[left, right]`` with left < right, each once."""
        return [[k, j] for k, j in enumerate(self.flip_indices) if k < j]

    @property
    def group_ids(self) -> dict[str, list[int]]:
        """Group name -> keypoint indices (empty when the set defines no groups)."""
        return {name: list(ids) for name, ids in self.groups}

    def index(self, name: str) -> int:
        return self.keypoint_names.index(name)

    def to_dict(self) -> dict:
        """The YAML form (``parse_metainfo`` of it gives this set back); exports carry it as ``keypoints.yaml``."""
        names = list(self.keypoint_names)
        swap = {names[k]: names[j] for k, j in enumerate(self.flip_indices)
                if k < j and _mirror_name(names[k]) != names[j]}
        data = {"name": self.name, "keypoints": names, "sigmas": list(self.sigmas),
                "skeleton": [[names[a], names[b]] for a, b in self.skeleton],
                "upper_body": [names[i] for i in self.upper_body_ids],
                "lower_body": [names[i] for i in self.lower_body_ids]}
        if swap:
            data["swap"] = swap
        if self.groups:
            data["groups"] = {group: [names[i] for i in ids] for group, ids in self.groups}
        return data


def normalise_name(name: str) -> str:
    """A keypoint or class name compared across tools: case, spaces, ``-`` and ``.`` ignored (``Left Eye`` and
    ``left-eye`` are ``left_eye``)."""
    return re.sub(r"[\s\-.]+", "_", str(name).strip()).lower()


def _mirror_name(name: str) -> str | None:
    """``left_eye`` -> ``right_eye``: swaps a whole ``left``/``right`` word (any case) between ``_``."""
    words = name.split("_")
    for i, word in enumerate(words):
        for a, b in (("left", "right"), ("right", "left")):
            if word.lower() == a:
                words[i] = b.upper() if word.isupper() else b.capitalize() if word[0].isupper() else b
                return "_".join(words)
    return None


def named_set(spec: str, source: str, chain: tuple[str, ...]) -> "KeypointMetainfo":
    """The set ``spec`` that the set ``source`` names: a built-in name, or a YAML file in ``source``'s folder or
    below it (``source`` not a file: built-in names only); a chain that comes back to a file is an error."""
    if not Path(spec).suffix:
        return load_metainfo(spec)
    folder = Path(source).parent if Path(source).is_file() else None
    path = inside(folder, folder / spec, follow_links=True) if folder is not None else None
    if path is None:
        where = f"the folder of {source} ({folder})" if folder is not None else "a file"
        raise MetainfoError(f"'{spec}' is not inside {where}: a set names built-in sets, or files beside it")
    if str(path.resolve()) in chain:
        raise MetainfoError(f"'{spec}' leads back to itself: {' -> '.join(chain + (str(path.resolve()),))}")
    return read_set_file(path, chain)


def set_names(spec: str, source: str, field: str, what: str = "", chain: tuple[str, ...] = ()) -> list[str]:
    """The keypoint names of the set ``spec`` a ``field`` of the set ``source`` names (``named_set``)."""
    try:
        return list(named_set(spec, source, chain).keypoint_names)
    except MetainfoError as err:
        raise MetainfoError(f"{source}: field '{field}': {what}{err}") from None


def extended(data: dict, source: str, chain: tuple[str, ...] = ()) -> dict:
    """A set that ``extends`` another: the base's keypoints, sigmas, skeleton, body halves, swaps and groups first,
    then this file's (its ``keypoints`` are the new names only)."""
    base = data["extends"]
    if not isinstance(base, str):
        raise MetainfoError(f"{source}: field 'extends': the name or YAML path of the set to extend, got {base!r}")
    try:
        parent = named_set(base, source, chain).to_dict()
    except MetainfoError as err:
        raise MetainfoError(f"{source}: field 'extends': {err}") from None
    merged = {key: value for key, value in data.items() if key != "extends"}
    for key in ("keypoints", "sigmas", "skeleton", "upper_body", "lower_body"):
        own = data.get(key)
        if own is not None and not isinstance(own, list):
            raise MetainfoError(f"{source}: field '{key}': must be a list")
        merged[key] = list(parent.get(key) or []) + list(own or [])
    for key in ("swap", "groups"):
        own = data.get(key)
        if own is not None and not isinstance(own, dict):
            raise MetainfoError(f"{source}: field '{key}': must be a mapping")
        merged[key] = {**(parent.get(key) or {}), **(own or {})}
    return merged


def parse_metainfo(data: dict, source: str, chain: tuple[str, ...] = ()) -> KeypointMetainfo:
    """Validate a metainfo mapping; every error names ``source`` and the field. ``chain``: the files of the sets
    being read that named this one (a loop is an error)."""

    def fail(field: str, msg: str) -> MetainfoError:
        return MetainfoError(f"{source}: field '{field}': {msg}")

    if not isinstance(data, dict):
        raise MetainfoError(f"{source}: expected a mapping with keys 'keypoints', 'sigmas', ...")
    if data.get("extends") is not None:
        data = extended(data, source, chain)
    names = data.get("keypoints")
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        raise fail("keypoints", "must be a non-empty list of keypoint names")
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise fail("keypoints", f"names must be unique; repeated: {dupes}")
    index = {n: i for i, n in enumerate(names)}

    sigmas = data.get("sigmas")
    if not isinstance(sigmas, list) or len(sigmas) != len(names):
        got = len(sigmas) if isinstance(sigmas, list) else type(sigmas).__name__
        raise fail("sigmas", f"needs one OKS sigma per keypoint ({len(names)}), got {got}")
    if not all(isinstance(s, (int, float)) and s > 0 for s in sigmas):
        raise fail("sigmas", "every sigma must be a positive number")

    def ids(field: str, value) -> list[int]:
        if value is None:
            return []
        unknown = [v for v in value if v not in index]
        if unknown:
            raise fail(field, f"unknown keypoint names {unknown}")
        return [index[v] for v in value]

    skeleton = []
    for link in data.get("skeleton") or []:
        if not (isinstance(link, list) and len(link) == 2):
            raise fail("skeleton", f"each link must be a pair of names, got {link!r}")
        skeleton.append(tuple(ids("skeleton", link)))

    flip = list(range(len(names)))
    swap = data.get("swap") or {}
    if not isinstance(swap, dict):
        raise fail("swap", "must map a keypoint name to its mirror partner")
    for k, name in enumerate(names):
        partner = swap.get(name)
        if partner is None:
            partner = next((a for a, b in swap.items() if b == name), None)
        if partner is None:
            mirrored = _mirror_name(name)
            if mirrored is not None and mirrored not in index:
                raise fail("keypoints", f"'{name}' has no mirror partner '{mirrored}'; add it or map it in 'swap'")
            partner = mirrored
        if partner is not None:
            if partner not in index:
                raise fail("swap", f"'{name}' swaps with unknown keypoint '{partner}'")
            flip[k] = index[partner]
    for k, j in enumerate(flip):
        if flip[j] != k:
            raise fail("swap", f"flip pairs must be symmetric: '{names[k]}' -> '{names[j]}' -> '{names[flip[j]]}'")

    groups = data.get("groups") or {}
    if not isinstance(groups, dict):
        raise fail("groups", "must map a group name to a list of keypoint names")
    groups = {group: set_names(members, source, "groups", f"group '{group}' names a set: ", chain)
              if isinstance(members, str) else members for group, members in groups.items()}
    for group, members in groups.items():
        if not isinstance(group, str) or not re.fullmatch(r"[A-Za-z0-9_]+", group):
            raise fail("groups", f"group name {group!r} must be letters, digits and '_' (it names a metric)")
        if not isinstance(members, list) or not members or not all(isinstance(m, str) for m in members):
            raise fail("groups", f"group '{group}' must be a non-empty list of keypoint names")
        repeated = sorted({m for m in members if members.count(m) > 1})
        if repeated:
            raise fail("groups", f"group '{group}' repeats {repeated}")
        unknown = [m for m in members if m not in index]
        if unknown:
            raise fail("groups", f"group '{group}' has unknown keypoint names {unknown}")

    return KeypointMetainfo(
        name=str(data.get("name", Path(source).stem)),
        keypoint_names=tuple(names),
        sigmas=tuple(float(s) for s in sigmas),
        skeleton=tuple(skeleton),
        flip_indices=tuple(flip),
        upper_body_ids=tuple(ids("upper_body", data.get("upper_body"))),
        lower_body_ids=tuple(ids("lower_body", data.get("lower_body"))),
        source=source,
        groups=tuple((group, tuple(ids("groups", members))) for group, members in groups.items()),
    )


@lru_cache(maxsize=None)
def load_metainfo(spec: str) -> KeypointMetainfo:
    """Load a built-in set by name (``coco17``) or a user's YAML file by path."""
    path = Path(spec)
    if not path.suffix:
        builtin = BUILTIN_DIR / f"{spec}.yaml"
        if not builtin.exists():
            names = sorted(p.stem for p in BUILTIN_DIR.glob("*.yaml"))
            raise MetainfoError(f"unknown keypoint set '{spec}': built-in sets are {names}, or give a YAML path")
        path = builtin
    return read_set_file(path)


def read_set_file(path: Path, chain: tuple[str, ...] = ()) -> KeypointMetainfo:
    """The set in the YAML file ``path`` (read through the boundary: a regular file of bounded size)."""
    if not path.exists():
        raise MetainfoError(f"keypoint metainfo file not found: {path}")
    try:
        data = read_yaml(path)
    except yaml.YAMLError as err:
        raise MetainfoError(f"{path}: not valid YAML: {err}") from err
    except (OSError, DataError) as err:
        raise MetainfoError(f"{path}: cannot be read ({err})") from None
    return parse_metainfo(data, str(path), chain + (str(Path(path).resolve()),))


def builtin_set_with(names) -> str | None:
    """The built-in set whose keypoints are ``names`` in this order (a released model's rows), if any."""
    names = list(names or [])
    return next((p.stem for p in sorted(BUILTIN_DIR.glob("*.yaml"))
                 if list(load_metainfo(p.stem).keypoint_names) == names), None)
