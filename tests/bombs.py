"""Decompression bombs of every decoder the project reads: each file is small (at most ~150 kB) and declares more
than the default pixel limit (100 megapixels); decoded, each would take 0.4-0.8 GB as RGB."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import cv2
import numpy as np

SIDE = 12000  # 144 megapixels


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def png_bomb(side: int = SIDE, bits: int = 1, valid: bool = True) -> bytes:
    """A greyscale PNG of zeros (``bits`` 1 or 8); ``valid=False``: the header alone."""
    data = b""
    if valid:
        rows, compress = bytes(1 + (side * bits + 7) // 8) * 1000, zlib.compressobj(9)
        data = b"".join(compress.compress(rows) for _ in range(side // 1000)) + compress.flush()
    return (b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", struct.pack(">IIBBBBB", side, side, bits, 0, 0, 0, 0))
            + _chunk(b"IDAT", data) + _chunk(b"IEND", b""))


def jpeg_bomb(side: int = SIDE) -> bytes:
    """A real 16 x 16 JPEG whose frame header says ``side`` x ``side`` (libjpeg allocates by the header)."""
    raw = bytearray(cv2.imencode(".jpg", np.full((16, 16), 128, np.uint8))[1].tobytes())
    sof = raw.index(b"\xff\xc0")
    raw[sof + 5:sof + 9] = struct.pack(">HH", side, side)
    return bytes(raw)


def tiff_bomb(side: int = SIDE, claimed: int | None = None) -> bytes:
    """A 1-bit deflate TIFF of zeros (18 kB for 12000); ``claimed``: a second width / length entry after the first
    (libtiff keeps the first of a repeated tag; a reader that keeps the last is lied to)."""
    data = zlib.compress(bytes((side + 7) // 8) * side, 9)
    entries = [(256, 4, side), (257, 4, side)] + ([(256, 4, claimed), (257, 4, claimed)] if claimed else [])
    count = len(entries) + 7
    start = 8 + 2 + 12 * count + 4
    entries += [(258, 3, 1), (259, 3, 8), (262, 3, 1), (273, 4, start), (277, 3, 1), (278, 4, side),
                (279, 4, len(data))]
    out = b"II*\x00" + struct.pack("<IH", 8, count)
    for tag, kind, value in entries:
        out += struct.pack("<HHI", tag, kind, 1) + (struct.pack("<HH", value, 0) if kind == 3 else
                                                    struct.pack("<I", value))
    return out + b"\x00\x00\x00\x00" + data


def webp_bomb() -> bytes:
    """A real lossless 16 x 16 WebP whose header says 16384 x 16384 (the format's largest)."""
    raw = bytearray(cv2.imencode(".webp", np.full((16, 16, 3), 128, np.uint8), [cv2.IMWRITE_WEBP_QUALITY, 101])[1])
    assert raw[12:16] == b"VP8L", "OpenCV wrote a lossy WebP"
    bits = int.from_bytes(raw[21:25], "little")
    raw[21:25] = ((bits & ~((1 << 28) - 1)) | 0x3FFF | (0x3FFF << 14)).to_bytes(4, "little")
    return bytes(raw)


BOMBS = {"1bit.png": lambda: png_bomb(bits=1), "grey.png": lambda: png_bomb(bits=8), "photo.jpg": jpeg_bomb,
         "scan.tif": tiff_bomb, "lying.tif": lambda: tiff_bomb(claimed=10), "photo.webp": webp_bomb}


def write_bombs(folder: Path) -> list[str]:
    """Every bomb of :data:`BOMBS` in ``folder``; their names."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, make in BOMBS.items():
        (folder / name).write_bytes(make())
    return list(BOMBS)
