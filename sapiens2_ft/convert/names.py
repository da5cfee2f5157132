"""Mapping the tool's keypoint and label names onto the keypoint set and the class set, with counts for the report.

A name matches a target name when equal after ``--rename OLD=NEW`` and normalising (case, spaces, ``-`` and
``.`` as ``_``): ``Left Eye`` and ``left-eye`` match ``left_eye``.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import yaml

from datamodules.body_parts import SAPIENS2_PART_CLASSES
from datamodules.boundary.files import read_text, read_yaml
from datamodules.classes.class_set import BUILTIN_DIR, CLASS_SET_BYTES, ClassSet, ClassSetError, load_class_set
from datamodules.errors import DataError
from datamodules.keypoints.metainfo import normalise_name as normalise
from sapiens2_ft.convert.records import ConvertError



class NameMap:
    """Tool name -> index in ``targets``; counts matched targets and unmatched tool names as it goes. ``made_of``:
    each target's other names (a class set's merge: the Sapiens2 classes it is made ``from``), matched when no
    target has the name itself. ``class_set``: the class set the targets are (its spec), if any."""

    def __init__(self, targets, rename: dict[str, str] | None = None, made_of=None, class_set: str | None = None):
        self.targets = list(targets)
        self.class_set = class_set
        self.rename = {normalise(k): v for k, v in (rename or {}).items()}
        self.index = {**{normalise(s): i for i, sources in enumerate(made_of or ()) for s in sources},
                      **{normalise(n): i for i, n in enumerate(self.targets)}}
        self.matched: Counter = Counter()  # target name -> times seen
        self.unmatched: Counter = Counter()  # tool name -> times seen

    def __call__(self, name: str) -> int | None:
        key = normalise(self.rename.get(normalise(name), name))
        index = self.index.get(key)
        if index is None:
            self.unmatched[name] += 1
        else:
            self.matched[self.targets[index]] += 1
        return index


def parse_rename(items: list[str] | None) -> dict[str, str]:
    rename = {}
    for item in items or []:
        old, sep, new = item.partition("=")
        if not sep or not old.strip() or not new.strip():
            raise ConvertError(f"--rename {item!r}: expected OLD=NEW (a tool name = a keypoint or class name)")
        rename[old.strip()] = new.strip()
    return rename


def class_map(spec: str | None, rename: dict[str, str] | None = None) -> NameMap:
    """The tool's labels -> the classes of ``load_classes(spec)``: by name, or by the name of a class a merge is
    made from (``Torso`` -> ``Upper_Body`` of the ``coarse`` set)."""
    classes = load_classes(spec)
    if isinstance(classes, ClassSet):
        return NameMap(classes.names, rename, classes.sources, spec)
    return NameMap(classes, rename)


def load_classes(spec: str | None) -> list[str] | ClassSet:
    """The class set: the 29 Sapiens2 body parts (default), a class set (a built-in name such as ``coarse``, or a
    class set YAML: ``datamodules.classes``), a file (one name per line, or a YAML list), or a comma-separated list.
    Index 0 is what unlabelled pixels get."""
    if spec is None:
        return list(SAPIENS2_PART_CLASSES)
    path = Path(spec)
    if not path.suffix and (BUILTIN_DIR / f"{spec}.yaml").is_file():
        return load_class_set(spec)
    if os.path.lexists(path):
        names = _class_file(path)
        if isinstance(names, dict):
            try:
                return load_class_set(str(path))
            except ClassSetError as err:
                raise ConvertError(f"--classes {err}") from None
    elif "," in spec or not path.suffix:
        names = [n.strip() for n in spec.split(",") if n.strip()]
    else:
        raise ConvertError(f"--classes {spec}: file not found")
    names = [str(n) for n in names]
    repeated = sorted({n for n in names if [normalise(m) for m in names].count(normalise(n)) > 1})
    if len(names) < 2 or repeated or len(names) > 255:
        why = f"repeated names {repeated}" if repeated else f"{len(names)} names (2 to 255 are needed)"
        raise ConvertError(f"--classes {spec}: {why}")
    return names


def _class_file(path: Path) -> list | dict:
    """The names of a class-set file: a YAML list (a mapping: a class set, read by ``load_class_set``), else one
    name a line; a regular file of at most
    ``CLASS_SET_BYTES`` (a folder, FIFO or device, or a larger file, is a ``ConvertError`` naming it)."""
    try:
        text = read_text(path, CLASS_SET_BYTES, "class set")
        try:
            data = read_yaml(path, CLASS_SET_BYTES)
        except yaml.YAMLError:
            data = None
        return data if isinstance(data, (list, dict)) else [line.strip() for line in text.splitlines() if line.strip()]
    except DataError as err:
        raise ConvertError(f"--classes {path}: {err}") from None
    except OSError as err:
        raise ConvertError(f"--classes {path}: cannot be read ({err.strerror})") from None


def name_report(title: str, names: NameMap, people: int | None = None, limit: int = 40) -> list[str]:
    """Lines of the summary: matches per target, tool names that matched nothing, and (for keypoints, with the
    number of ``people``) targets labelled for fewer people than there are."""
    lines = [f"{title}:"]
    seen = [f"{n} {names.matched[n]}" for n in names.targets if names.matched[n]]
    lines.append(f"  matched ({len(seen)} of {len(names.targets)}): " + (", ".join(seen[:limit]) or "none")
                 + (f", ... {len(seen) - limit} more" if len(seen) > limit else ""))
    if names.unmatched:
        items = [f"{n!r} {c}" for n, c in names.unmatched.most_common()]
        lines.append(f"  unmapped tool names ({len(items)}, left out): " + ", ".join(items[:limit])
                     + (f", ... {len(items) - limit} more" if len(items) > limit else ""))
    if people:
        never = [n for n in names.targets if not names.matched[n]]
        partly = [f"{n} {people - names.matched[n]}" for n in names.targets if 0 < names.matched[n] < people]
        if never:
            lines.append(f"  missing for every person ({len(never)}): " + ", ".join(never[:limit])
                         + (f", ... {len(never) - limit} more" if len(never) > limit else ""))
        if partly:
            lines.append(f"  missing for some of the {people} people (count): " + ", ".join(partly[:limit])
                         + (f", ... {len(partly) - limit} more" if len(partly) > limit else ""))
    return lines
