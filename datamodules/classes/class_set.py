"""Class sets of segmentation as data: names in label-id order, where each class comes from, colours.

A class set is one YAML file::

    name: my_parts
    classes:
      - Background                                  # one of the 29 Sapiens2 classes: keeps its row and its labels
      - {name: Clothes, from: [Upper_Clothing, Lower_Clothing, Apparel], colour: [220, 40, 40]}   # a merge
      - {name: Bag, colour: [40, 40, 220]}         # new: learned from the user's own labels
      - Hair

Index = class id; the first class is the background (``Background``, or a class made ``from`` it). A class named as
one of the 29 (``datamodules.body_parts.SAPIENS2_PART_CLASSES``) without ``from`` is that class; ``from`` lists the
29's classes a class is made of (one of them: a renamed class); any other name is new. Each of the 29 goes into at
most one class. ``colour``: ``[r, g, b]`` (default: the palette's colour of its id). Names are letters, digits and
``_`` (they name metrics), unique whatever their case.

A set may ``extends: coarse`` (a built-in name, or a YAML file in the folder of the set that names it, or below
it): the base's classes come first, the file lists only what it adds; a chain that comes back to a file is an error
naming the files. Built-in sets live beside this file: ``sapiens2_29`` (the released heads' rows) and ``coarse``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import yaml

from datamodules.body_parts import SAPIENS2_PART_CLASSES, resolve_class_names
from datamodules.boundary.files import read_text, read_yaml
from datamodules.boundary.folders import inside
from datamodules.errors import BadInput, DataError, RefusedInput
from datamodules.keypoints.metainfo import normalise_name

BUILTIN_DIR = Path(__file__).parent
CLASS_SET_FILE = "classes.yaml"  # the name a class set travels under beside an exported seg model
CLASS_SET_BYTES = 1 << 20  # 255 classes with their sources and colours fit in a few kB
MAX_CLASSES = 255  # uint8 label maps, 255 = ignored
IGNORE_INDEX = 255
NAME = re.compile(r"[A-Za-z0-9_]+")


class ClassSetError(BadInput):
    """A class set file is malformed; the message names the file and the class."""


@dataclass(frozen=True)
class ClassSet:
    name: str
    names: tuple[str, ...]
    sources: tuple[tuple[str, ...], ...]  # per class: the Sapiens2 classes it is made of (empty: a new class)
    colours: tuple[tuple[int, int, int] | None, ...]  # per class: its colour, None: the palette's
    source: str

    def __len__(self) -> int:
        return len(self.names)

    @property
    def merges(self) -> dict[str, tuple[str, ...]]:
        """Class -> the Sapiens2 classes whose head rows it starts from, for each class that is not one of the 29
        under its own name (a merge, a renamed class)."""
        return {name: rows for name, rows in zip(self.names, self.sources) if rows and rows != (name,)}

    @property
    def new(self) -> list[str]:
        """The classes none of the 29 makes: learned from the user's own labels only."""
        return [name for name, rows in zip(self.names, self.sources) if not rows]

    def to_dict(self) -> dict:
        """The YAML form (``parse_class_set`` of it gives this set back)."""
        classes = []
        for name, rows, colour in zip(self.names, self.sources, self.colours):
            entry = {"name": name, **({"from": list(rows)} if rows and rows != (name,) else {})}
            classes.append({**entry, "colour": list(colour)} if colour is not None else entry)
        return {"name": self.name, "classes": [c["name"] if len(c) == 1 else c for c in classes]}

    def label_table(self, label_names, where: str) -> np.ndarray:
        """(256,) uint8: a label file's class id (``label_names[id]``, the classes of the data) -> this set's id, 255
        kept. A data class maps to the set's class of its name, else to the class made ``from`` it (names compared
        with ``normalise_name``). A data class the set lacks, or a class of the set the data never labels, is a
        ``DataError`` naming ``where`` and listing both sets."""
        own = {normalise_name(n): i for i, n in enumerate(self.names)}
        made_of = {normalise_name(s): i for i, rows in enumerate(self.sources) for s in rows}
        table = np.full(256, IGNORE_INDEX, np.uint8)
        unknown = []
        for i, name in enumerate(label_names):
            key = normalise_name(name)
            target = own.get(key, made_of.get(key))
            if target is None:
                unknown.append(str(name))
            else:
                table[i] = target
        reached = set(table[:len(label_names)].tolist())
        never = [n for i, n in enumerate(self.names) if i not in reached]
        if unknown or never:
            said = [f"not in the set: {unknown}"] * bool(unknown) + [f"never labelled: {never}"] * bool(never)
            raise DataError(f"{where}: the label files' classes do not match the class set '{self.name}' "
                            f"({'; '.join(said)}). The label files' {len(label_names)} classes: {list(label_names)}; "
                            f"the set's {len(self)}: {list(self.names)}")
        return table


def named_set(spec: str, source: str, chain: tuple[str, ...]) -> ClassSet:
    """The set ``spec`` that the set ``source`` names: a built-in name, or a YAML file in ``source``'s folder or
    below it; a chain that comes back to a file is an error."""
    if not Path(spec).suffix:
        return load_class_set(spec)
    folder = Path(source).parent
    path = inside(folder, folder / spec, follow_links=True) if Path(source).is_file() else None
    if path is None:
        raise ClassSetError(f"{source}: field 'extends': '{spec}' is not inside the folder of {source}: a set "
                            "extends built-in sets, or files beside it")
    if str(path.resolve()) in chain:
        raise ClassSetError(f"{source}: field 'extends': '{spec}' leads back to itself: "
                            f"{' -> '.join(chain + (str(path.resolve()),))}")
    return read_set_file(path, chain)


def _entry(item, source: str) -> tuple[str, tuple[str, ...] | None, tuple[int, int, int] | None]:
    """(name, ``from`` or None, colour or None) of one item of ``classes``."""
    if isinstance(item, str):
        item = {"name": item}
    if not isinstance(item, dict) or not isinstance(item.get("name"), str) or set(item) - {"name", "from", "colour"}:
        raise ClassSetError(f"{source}: field 'classes': each class is a name or a mapping of 'name', 'from' and "
                            f"'colour', got {item!r}")
    name, rows, colour = item["name"], item.get("from"), item.get("colour")
    if not NAME.fullmatch(name):
        raise ClassSetError(f"{source}: class {name!r}: a name is letters, digits and '_' (it names a metric)")
    if rows is not None:
        unknown = [r for r in rows if r not in SAPIENS2_PART_CLASSES] if isinstance(rows, list) else None
        if not rows or unknown is None or unknown:
            raise ClassSetError(f"{source}: class '{name}': 'from' lists the Sapiens2 classes it is made of; "
                                f"unknown: {unknown if unknown else rows!r} (the 29: {list(SAPIENS2_PART_CLASSES)})")
        rows = tuple(rows)
    if colour is not None:
        if not (isinstance(colour, list) and len(colour) == 3
                and all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= 255 for v in colour)):
            raise ClassSetError(f"{source}: class '{name}': 'colour' is [r, g, b], each 0-255, got {colour!r}")
        colour = tuple(colour)
    return name, rows, colour


def parse_class_set(data, source: str, chain: tuple[str, ...] = ()) -> ClassSet:
    """Validate a class set mapping; every error names ``source`` (and the class). ``chain``: the files of the sets
    being read that named this one (a loop is an error)."""
    if not isinstance(data, dict) or set(data) - {"name", "classes", "extends"}:
        raise ClassSetError(f"{source}: expected a mapping of 'name', 'classes' and (optional) 'extends'")
    entries = data.get("classes") or []
    if not isinstance(entries, list):
        raise ClassSetError(f"{source}: field 'classes': a list of classes")
    base = data.get("extends")
    if base is not None:
        if not isinstance(base, str):
            raise ClassSetError(f"{source}: field 'extends': the name or YAML path of the set to extend, got {base!r}")
        entries = named_set(base, source, chain).to_dict()["classes"] + entries
    parsed = [_entry(item, source) for item in entries]
    names = [name for name, _, _ in parsed]
    if not 2 <= len(names) <= MAX_CLASSES:
        raise ClassSetError(f"{source}: field 'classes': 2 to {MAX_CLASSES} classes, got {len(names)}")
    keys = [normalise_name(n) for n in names]
    repeated = sorted({n for n, k in zip(names, keys) if keys.count(k) > 1})
    if repeated:
        raise ClassSetError(f"{source}: field 'classes': names must be unique (whatever their case); repeated: "
                            f"{repeated}")
    sources = [rows if rows is not None else (name,) if name in SAPIENS2_PART_CLASSES else ()
               for name, rows, _ in parsed]
    taken: dict[str, str] = {}
    for name, rows in zip(names, sources):
        for row in rows:
            if row in taken:
                raise ClassSetError(f"{source}: '{row}' goes into both '{taken[row]}' and '{name}': each of the 29 "
                                    "goes into one class at most")
            taken[row] = name
    if "Background" not in sources[0]:
        raise ClassSetError(f"{source}: the first class is the background: 'Background', or a class made from it; "
                            f"got '{names[0]}'")
    return ClassSet(str(data.get("name", Path(source).stem)), tuple(names), tuple(sources),
                    tuple(colour for _, _, colour in parsed), source)


@lru_cache(maxsize=None)
def load_class_set(spec: str) -> ClassSet:
    """A built-in set by name (``coarse``) or a user's YAML file by path."""
    path = Path(spec)
    if not path.suffix:
        path = BUILTIN_DIR / f"{spec}.yaml"
        if not path.exists():
            names = sorted(p.stem for p in BUILTIN_DIR.glob("*.yaml"))
            raise ClassSetError(f"unknown class set '{spec}': built-in sets are {names}, or give a YAML path")
    return read_set_file(path)


def read_set_file(path: Path, chain: tuple[str, ...] = ()) -> ClassSet:
    """The set in the YAML file ``path`` (read through the boundary: a regular file of at most
    ``CLASS_SET_BYTES``, few aliases)."""
    if not path.exists():
        raise ClassSetError(f"class set file not found: {path}")
    try:
        data = read_yaml(path, CLASS_SET_BYTES)
    except yaml.YAMLError as err:
        raise ClassSetError(f"{path}: not valid YAML: {err}") from None
    except RefusedInput:
        raise
    except (OSError, DataError) as err:
        raise ClassSetError(f"{path}: cannot be read ({err})") from None
    return parse_class_set(data, str(path), chain + (str(Path(path).resolve()),))


def plain_set(names, source: str = "data.class_names") -> ClassSet:
    """The set of bare class names (``data.class_names``, a dataset's ``classes.txt``): a name of the 29 is that
    class, any other new; no colours."""
    names = tuple(str(n) for n in names)
    return ClassSet(source, names, tuple((n,) if n in SAPIENS2_PART_CLASSES else () for n in names),
                    (None,) * len(names), source)


def resolve_class_set(num_classes: int, class_names: list[str] | None, classes: str | None) -> ClassSet:
    """The class set of ``data.classes`` (a set's name or YAML path), else of ``data.num_classes`` /
    ``data.class_names`` (``body_parts.resolve_class_names``)."""
    if classes is None:
        return plain_set(resolve_class_names(num_classes, class_names))
    if class_names is not None:
        raise ClassSetError(f"data.classes ({classes}) and data.class_names: give one of them")
    return load_class_set(classes)


def set_class_names(num_classes: int, class_names: list[str] | None, classes: str | None) -> list[str]:
    """The class names of ``resolve_class_set`` (the link to ``model.class_names``)."""
    return list(resolve_class_set(num_classes, class_names, classes).names)


def label_names(spec: str | Path) -> list[str]:
    """The classes a dataset's label files are written in: a ``.txt`` file of one name a line (``classes.txt``,
    as ``convert`` writes it), else a class set's names (a built-in name or a YAML path)."""
    path = Path(spec)
    if path.suffix != ".txt":
        return list(load_class_set(str(spec)).names)
    names = [line.strip() for line in read_text(path, CLASS_SET_BYTES, "class names").splitlines() if line.strip()]
    if not names or len(names) > MAX_CLASSES:
        raise DataError(f"{path}: 1 to {MAX_CLASSES} class names a line, got {len(names)}")
    return names
