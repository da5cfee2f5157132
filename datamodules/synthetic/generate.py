"""Generate the synthetic dataset on disk: ``generate_dataset`` and ``ensure_dataset``.

Generation happens in a hidden temporary folder next to the target that is renamed into
place at the end, so an interrupted run never leaves a dataset that looks complete.
An existing target is only replaced when it is empty or holds nothing but files of a
previous synthetic dataset, and no other process reads it (``in_use``); anything else is refused and left
untouched.
"""

import contextlib
import os
import re
import shutil
import time
import uuid
from pathlib import Path

from tqdm import tqdm

from ..boundary.files import read_json
from . import in_use
from .scene import render_sample
from .writer import (
    DENSE_FOLDERS, SPLITS, coco_records, image_stem, make_split_folders, write_classes, write_coco, write_json, write_sample,
)

GENERATOR = "sapiens2-ft synthetic"
VERSION = 3
# 2: the annotations add each heel and foot tip (the images are as version 1 drew them)
# 3: adds albedo/ (the other files are as version 2 wrote them)
PARAMETER_KEYS = ("num", "seed", "height", "width", "val_fraction", "version")
CONVENTIONS = {
    "camera": "OpenCV pinhole: x right, y down, z forward, metres; pixel (row i, col j) centre is (u=j, v=i)",
    "keypoints": "COCO-17 then left/right heel and foot tip [x, y, v] in pixels; v=2 visible, v=1 inside the image "
                 "but occluded, v=0 outside (x=y=0)",
    "labels": "uint8 Sapiens2 29-class body-part ids, 0 = background",
    "normals": "float32 HxWx3 camera-frame unit normals (n_z < 0 faces the camera), 0 on background",
    "depth": "float32 HxW z-depth in metres, 0 on background",
    "masks": "uint8 255 where a figure covers the pixel centre",
    "alpha": "uint8 matte from 4x4 supersampling at silhouette edges",
    "foreground": "RGB figure colour un-mixed from the background (0 where alpha is 0)",
    "albedo": "RGB base colour of the surface before lighting where a figure covers the pixel centre, 0 elsewhere",
}
_OWN_FILE = re.compile(  # what the generator writes
    r"dataset\.json|classes\.txt|annotations/(train|val)\.json|(train|val)/("
    + "|".join(DENSE_FOLDERS) + r")/\d+\.(png|npy|txt)"
)


def num_val_images(num_images: int, val_fraction: float) -> int:
    """Validation images are the last ``round(num_images * val_fraction)`` indices."""
    count = int(round(num_images * val_fraction))
    if val_fraction > 0 and count == 0 and num_images > 1:
        count = 1
    return min(count, num_images)


def _parameters(num_images, seed, height, width, val_fraction) -> dict:
    if int(num_images) != num_images or num_images < 1:
        raise ValueError(f"num_images must be a positive integer, got {num_images!r}")
    if int(height) != height or int(width) != width or height < 32 or width < 32:
        raise ValueError(f"height and width must be integers >= 32, got {height!r} x {width!r}")
    if not 0.0 <= val_fraction <= 1.0:
        raise ValueError(f"val_fraction must be in [0, 1], got {val_fraction!r}")
    return {"num": int(num_images), "seed": int(seed), "height": int(height), "width": int(width),
            "val_fraction": float(val_fraction), "version": VERSION}


def read_parameters(root: Path) -> dict | None:
    """Parameters of the synthetic dataset at ``root``, or None if it is not one."""
    try:
        info = read_json(Path(root) / "dataset.json")
    except (OSError, ValueError):
        return None
    if not isinstance(info, dict) or info.get("generator") != GENERATOR:
        return None
    return {key: info.get(key) for key in PARAMETER_KEYS}


def _describe(params: dict) -> str:
    return (f"{params['num']} images of seed {params['seed']} at {params['height']}x{params['width']}, "
            f"val fraction {params['val_fraction']}")


def _check_replaceable(root: Path) -> None:
    """Raise unless ``root`` is absent, an empty folder, or purely a previous synthetic dataset."""
    if not root.exists():
        return
    if not root.is_dir():
        raise FileExistsError(f"{root} exists and is not a directory")
    if not any(root.iterdir()):
        return
    if read_parameters(root) is None:
        raise FileExistsError(
            f"refusing to write into {root}: it is not empty and is not a synthetic dataset "
            f"(no dataset.json from this generator). Choose a new or empty directory."
        )
    for path in root.rglob("*"):
        relative = path.relative_to(root).as_posix()
        if path.is_file() or path.is_symlink():
            if not _OWN_FILE.fullmatch(relative):
                raise FileExistsError(
                    f"refusing to replace the synthetic dataset at {root}: it contains a file the "
                    f"generator did not write ({relative}). Move it away or choose another directory."
                )


def _build(root: Path, params: dict, progress: bool) -> dict:
    """Render and write every image into ``root`` (a fresh folder)."""
    num_images, seed = params["num"], params["seed"]
    num_train = num_images - num_val_images(num_images, params["val_fraction"])
    records = {split: ([], []) for split in SPLITS}
    for split in SPLITS:
        make_split_folders(root / split)
    for index in tqdm(range(num_images), desc="synthetic dataset", unit="img", disable=not progress):
        split = SPLITS[index >= num_train]
        stem = image_stem(index, num_images)
        sample = render_sample(seed, index, params["height"], params["width"])
        write_sample(root / split, stem, sample)
        image, annotations = coco_records(sample, index, f"{stem}.png")
        records[split][0].append(image)
        records[split][1].extend(annotations)
    write_classes(root)
    for split, (images, annotations) in records.items():
        write_coco(root / "annotations" / f"{split}.json", images, annotations)
    counts = {split: {"images": len(images), "annotations": len(annotations)}
              for split, (images, annotations) in records.items()}
    info = {"generator": GENERATOR, **params, "splits": counts, "conventions": CONVENTIONS}
    write_json(root / "dataset.json", info, indent=2)  # written last: its presence marks a complete dataset
    return counts


def _move_into_place(staging: Path, root: Path) -> None:
    """Rename ``staging`` to ``root``, replacing an empty folder or a previous dataset."""
    if root.exists() and not any(root.iterdir()):
        root.rmdir()
    if not root.exists():
        staging.rename(root)
        return
    retired = root.parent / f".{root.name}.old-{uuid.uuid4().hex[:8]}"
    root.rename(retired)
    staging.rename(root)
    shutil.rmtree(retired)


def generate_dataset(out_dir, num_images: int, seed: int, height: int = 256, width: int = 192,
                     val_fraction: float = 0.2, progress: bool = True) -> dict:
    """Render ``num_images`` images into ``out_dir`` and return a summary.

    The summary holds ``out_dir``, per-split image/annotation ``counts`` and ``seconds``.
    Output bytes depend only on the parameters (per-image RNG seeded by (seed, index)).
    """
    params = _parameters(num_images, seed, height, width, val_fraction)
    root = Path(out_dir).expanduser().absolute()
    _check_replaceable(root)
    existing = read_parameters(root)
    root.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    with contextlib.ExitStack() as stack:
        if existing is not None and existing != params:  # fail now, not after minutes of rendering
            stack.enter_context(in_use.Replacing(root, f"{_describe(existing)}; asked for {_describe(params)}"))
        staging = root.parent / f".{root.name}.partial-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        staging.mkdir()
        try:
            counts = _build(staging, params, progress)
            finished_meanwhile = existing != params and read_parameters(root) == params
            if not finished_meanwhile:  # else another process (e.g. a DDP rank) wrote the same data; keep it
                _check_replaceable(root)
                _move_into_place(staging, root)
        finally:
            if staging.exists():
                shutil.rmtree(staging)
    return {"out_dir": str(root), "counts": counts, "seconds": round(time.perf_counter() - start, 3)}


def ensure_dataset(out_dir, num_images: int, seed: int, height: int = 256, width: int = 192,
                   val_fraction: float = 0.2) -> Path:
    """Return ``out_dir`` after making sure it holds the synthetic dataset with these parameters.

    Does nothing when ``out_dir/dataset.json`` already records the same parameters; otherwise generates it (with
    a progress bar), replacing an older synthetic dataset unless another process reads that one
    (:class:`~datamodules.synthetic.in_use.DatasetInUseError`). This process then holds the dataset as read
    (``in_use.hold``) until it exits.
    """
    params = _parameters(num_images, seed, height, width, val_fraction)
    root = Path(out_dir).expanduser().absolute()
    if read_parameters(root) != params:
        generate_dataset(root, num_images, seed, height, width, val_fraction, progress=True)
    in_use.hold(root)
    return root
