"""A distributed checkpoint's ``.metadata`` and non-tensor items, read without running code.

torch's ``FileSystemReader.read_metadata`` unpickles ``.metadata``, and unpickling calls whatever the file names.
:func:`read_metadata` unpickles only what torch writes there (its checkpoint metadata classes, ``torch.Size``,
dtypes, the strided layout, paths) and refuses a file naming anything else before anything is called; it also
refuses shard names that leave the checkpoint's folder. :class:`SafeReader` is the ``FileSystemReader`` that
reads through it (for ``dcp.load``). The non-tensor items (an optimiser's hyper-parameters) are loaded by torch with
``torch.load(weights_only=False)``: :func:`check_byte_items` loads each with ``weights_only=True`` first, so a
checkpoint is refused before Lightning reads one that is not plain data.
"""

from __future__ import annotations

import io
import pickle
from pathlib import Path, PurePosixPath

import torch
from torch.distributed.checkpoint import FileSystemReader
from torch.distributed.checkpoint.metadata import BytesStorageMetadata, Metadata, StorageMeta

from datamodules.boundary.files import open_file
from datamodules.boundary.limits import max_file_bytes
from datamodules.errors import Refused, RefusedInput

METADATA_FILE = ".metadata"
_CHECKPOINT_CLASSES = {("torch.distributed.checkpoint.metadata", name) for name in (
    "Metadata", "TensorStorageMetadata", "BytesStorageMetadata", "ChunkStorageMetadata", "TensorProperties",
    "MetadataIndex", "StorageMeta", "_MEM_FORMAT_ENCODING")}
ALLOWED_GLOBALS = _CHECKPOINT_CLASSES | {
    ("torch.distributed.checkpoint.filesystem", "_StorageInfo"), ("torch", "Size"),
    ("torch.serialization", "_get_layout"), ("collections", "OrderedDict"),
    ("pathlib", "Path"), ("pathlib", "PosixPath"), ("pathlib", "WindowsPath"), ("pathlib", "PurePosixPath"),
    ("pathlib", "PureWindowsPath")}


class UnsafeCheckpointError(Refused, ValueError):
    """A distributed checkpoint holds something other than tensors and plain data, or names files outside itself."""


class _PlainUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        if (module, name) in ALLOWED_GLOBALS:
            return super().find_class(module, name)
        if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            return getattr(torch, name)
        raise UnsafeCheckpointError(f"{module}.{name}")


def read_metadata(directory: str | Path) -> Metadata:
    """The ``Metadata`` of the distributed checkpoint in ``directory``; UnsafeCheckpointError when the file names
    anything but torch's checkpoint classes or a shard outside ``directory``, ValueError when it does not load."""
    path = Path(directory) / METADATA_FILE
    try:
        with open_file(path) as f:
            metadata = _PlainUnpickler(f).load()
    except UnsafeCheckpointError as err:
        raise UnsafeCheckpointError(
            f"{path} names {err}, which torch's checkpoint metadata never holds: refused unread (unpickling it "
            "could run code). Use checkpoints you or someone you trust wrote.") from None
    except RefusedInput:
        raise
    except (OSError, EOFError, pickle.UnpicklingError, AttributeError, TypeError, ValueError, IndexError) as err:
        raise ValueError(f"{path} does not load ({type(err).__name__}: {err})") from err
    if not isinstance(metadata, Metadata):
        raise ValueError(f"{path} holds a {type(metadata).__name__}, not torch checkpoint metadata")
    for info in (metadata.storage_data or {}).values():
        name = getattr(info, "relative_path", None)
        if not isinstance(name, str) or PurePosixPath(name).name != name or name in ("", ".", ".."):
            raise UnsafeCheckpointError(f"{path} lists a shard {name!r} that is not a file of {directory}: refused")
    return metadata


def check_byte_items(directory: str | Path, metadata: Metadata) -> None:
    """Refuse a checkpoint whose non-tensor items do not load as tensors and plain data (``weights_only``)."""
    byte_keys = {key for key, meta in metadata.state_dict_metadata.items() if isinstance(meta, BytesStorageMetadata)}
    for index, info in (metadata.storage_data or {}).items():
        if index.fqn not in byte_keys:
            continue
        where = f"item {index.fqn!r} of {Path(directory) / info.relative_path}"
        if info.transform_descriptors:
            raise UnsafeCheckpointError(f"{where} is stored transformed ({info.transform_descriptors}): refused")
        if not 0 <= info.length <= max_file_bytes():
            raise UnsafeCheckpointError(f"{where} is {info.length:,} bytes, above the limit of {max_file_bytes():,}: "
                                        "refused unread")
        with open_file(Path(directory) / info.relative_path) as f:
            f.seek(info.offset)
            raw = f.read(info.length)
        try:
            torch.load(io.BytesIO(raw), map_location="cpu", weights_only=True)
        except Exception as err:
            reason = next((line.strip() for line in str(err).splitlines() if "Unsupported" in line),
                          type(err).__name__)
            raise UnsafeCheckpointError(f"{where} is not tensors and plain data ({reason}): refused unread") from None


class SafeReader(FileSystemReader):
    """``FileSystemReader`` whose metadata is read by :func:`read_metadata` (no code in it runs)."""

    def read_metadata(self, *args, **kwargs) -> Metadata:
        metadata = read_metadata(self.path)
        if getattr(metadata, "storage_meta", None) is None:
            metadata.storage_meta = StorageMeta()
        metadata.storage_meta.load_id = self.load_id
        return metadata
