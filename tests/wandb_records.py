"""Reads the records of an offline wandb run file (``run-<id>.wandb``) for tests.

The file is wandb's transaction log: a 7-byte header (``:W&B``, magic 0xBEE1, version 0), then
LevelDB log-format blocks of 32 KiB whose chunks (crc32, length, type) carry protobuf ``Record``
messages, split across blocks when long (types FULL 1, FIRST 2, MIDDLE 3, LAST 4).
"""

from __future__ import annotations

import struct
from pathlib import Path

from wandb.proto import wandb_internal_pb2

BLOCK = 32768
CHUNK_HEADER = 7


def read_records(path: Path) -> list:
    data = Path(path).read_bytes()
    assert data[:4] == b":W&B", f"{path} is not a wandb run file"
    records, pending, pos = [], b"", CHUNK_HEADER
    while pos + CHUNK_HEADER <= len(data):
        if BLOCK - pos % BLOCK < CHUNK_HEADER:  # block trailer too short for a chunk header: padding
            pos += BLOCK - pos % BLOCK
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + CHUNK_HEADER])
        payload = data[pos + CHUNK_HEADER:pos + CHUNK_HEADER + length]
        pos += CHUNK_HEADER + length
        if kind == 0 and length == 0:
            pos += BLOCK - pos % BLOCK if pos % BLOCK else 0
            continue
        pending = payload if kind in (1, 2) else pending + payload
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            records.append(record)
    return records


def logged_keys(path: Path) -> tuple[set[str], set[str]]:
    """(config keys, history keys) written to an offline run."""
    config, history = set(), set()
    for record in read_records(path):
        kind = record.WhichOneof("record_type")
        if kind == "config":
            config |= {item.key or "/".join(item.nested_key) for item in record.config.update}
        elif kind == "history":
            history |= {item.key or "/".join(item.nested_key) for item in record.history.item}
    return config, history
