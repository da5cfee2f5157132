"""The ``data.synthetic`` option: render the embedded synthetic demo dataset into ``data.root`` when it is missing."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from datamodules.errors import DataError


@dataclass
class SyntheticData:
    """Generate the synthetic demo dataset into ``root`` when it is missing.

    Args:
        num_images: Images to render (train + val).
        seed: Generator seed; the same seed gives the same files.
        val_fraction: Share of images in the val split.
        height: Image height in pixels.
        width: Image width in pixels.
    """

    num_images: int = 600
    seed: int = 0
    val_fraction: float = 0.2
    height: int = 256
    width: int = 192


def render_if_missing(root: Path, synthetic: SyntheticData | None) -> None:
    """Render the dataset ``synthetic`` describes into ``root`` unless it is there already (None: nothing)."""
    if synthetic is None:
        return
    from datamodules.synthetic import ensure_dataset  # the renderer loads only where a config asks for it

    try:
        ensure_dataset(root, synthetic.num_images, synthetic.seed, height=synthetic.height, width=synthetic.width,
                       val_fraction=synthetic.val_fraction)
    except FileExistsError as err:  # a folder of other files (or one in use): the renderer refuses to write there
        raise DataError(f"data.synthetic: {err} (or leave data.synthetic unset to train on the data in it)") from None
