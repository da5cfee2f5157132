"""A distributed checkpoint from someone else runs no code: its ``.metadata`` and its non-tensor items are refused
unread when they name anything but torch's checkpoint classes and plain data, on every path that reads one
(``export``, ``predict --model``, ``--init_from``, ``--resume``)."""

from __future__ import annotations

import builtins
import io
import pickle
import shutil
from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp

from datamodules.errors import BadInput
from sapiens2_ft import export
from sapiens2_ft.models.checkpoints import CheckpointError, load_model
from sapiens2_ft.models.dcp_metadata import read_metadata
from sapiens2_ft.tasks.registry import model_class
from sapiens2_ft.training.run_dir import resolve_resume, unreadable_reason


class CreatesFile:
    """Unpickling this opens (creates) ``path``: what a hostile pickle can do."""

    def __init__(self, path: Path):
        self.path = path

    def __reduce__(self):
        return builtins.open, (str(self.path), "w")


@pytest.fixture(scope="module")
def distributed(seg_checkpoint, tmp_path_factory) -> Path:
    """``seg_checkpoint`` in the layout FSDP2 writes (``.metadata`` + ``*.distcp`` + ``meta.pt``), with a
    non-tensor item (as an optimiser's hyper-parameters are stored)."""
    directory = tmp_path_factory.mktemp("dcp") / "last.ckpt"
    state = torch.load(seg_checkpoint, weights_only=True)
    dcp.save({"state_dict": state.pop("state_dict"), "hyper": {"lr": 0.1}}, checkpoint_id=str(directory),
             no_dist=True)
    state.pop("optimizer_states", None)
    torch.save(state, directory / "meta.pt")
    return directory


def copy_of(distributed: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(distributed, tmp_path / "run" / "checkpoints" / "last.ckpt"))


def test_a_plain_distributed_checkpoint_still_loads(distributed):
    model, info = load_model(distributed, model_class)
    assert info.task == "seg" and sum(p.numel() for p in model.parameters()) > 0
    assert unreadable_reason(distributed) is None


def test_metadata_that_would_run_code_is_refused_on_every_path(distributed, tmp_path):
    directory = copy_of(distributed, tmp_path)
    marker = tmp_path / "ran"
    (directory / ".metadata").write_bytes(pickle.dumps(CreatesFile(marker)))
    with pytest.raises(CheckpointError, match=r"\.metadata names io\.open.*refused unread"):
        load_model(directory, model_class)
    with pytest.raises(SystemExit, match=r"io\.open.*refused unread"):
        export.main(["--checkpoint", str(directory), "--out", str(tmp_path / "export")])
    assert "io.open" in unreadable_reason(directory)
    with pytest.raises(BadInput, match=r"--resume: .*io\.open"):
        resolve_resume(str(directory), None, "seg")
    assert not marker.exists()


def test_a_non_tensor_item_that_would_run_code_is_refused_before_resume(distributed, tmp_path):
    directory = copy_of(distributed, tmp_path)
    marker = tmp_path / "ran"
    metadata = read_metadata(directory)
    info = next(v for k, v in metadata.storage_data.items() if k.fqn == "hyper.lr")
    shard = directory / info.relative_path
    saved = io.BytesIO()
    torch.save(CreatesFile(marker), saved)  # as torch's checkpoint writer stores a non-tensor item
    payload = saved.getvalue()
    info.offset, info.length = shard.stat().st_size, len(payload)
    with open(shard, "ab") as f:
        f.write(payload)
    (directory / ".metadata").write_bytes(pickle.dumps(metadata))
    reason = unreadable_reason(directory)
    assert "item 'hyper.lr'" in reason and "Unsupported global: GLOBAL io.open" in reason and "refused" in reason
    with pytest.raises(BadInput, match="(?s)--resume: .*item 'hyper.lr'"):
        resolve_resume(str(directory.parent.parent), None, "seg")
    assert not marker.exists()


def test_shards_named_outside_the_checkpoint_are_refused(distributed, tmp_path):
    directory = copy_of(distributed, tmp_path)
    metadata = read_metadata(directory)
    next(iter(metadata.storage_data.values())).relative_path = "../../secret.distcp"
    (directory / ".metadata").write_bytes(pickle.dumps(metadata))
    with pytest.raises(CheckpointError, match=r"lists a shard '\.\./\.\./secret\.distcp' that is not a file of"):
        load_model(directory, model_class)
