"""Datasets written as WebDataset shards read back as the same samples: pose, dense, a mix, from a URL too."""

from __future__ import annotations

import functools
import http.server
import json
import tarfile
import threading

import numpy as np
import pytest
import torch

from datamodules import loaders
from datamodules.errors import DataError
from datamodules.pose_datamodule import PoseDataModule
from datamodules.shards.writer import write_shards
from sapiens2_ft.tasks.dense_data import DenseTaskData

TRAIN_ANN = "annotations/person_keypoints_train2017.json"
KEYS = [(i, 5) for i in range(4)]


def pose_dm(coco, **kwargs) -> PoseDataModule:
    return PoseDataModule(root=str(coco), train_ann=TRAIN_ANN, train_images="train2017",
                          val_ann="annotations/person_keypoints_val2017.json", val_images="val2017", num_workers=0,
                          batch_size=2, input_size=(64, 48), **kwargs)


def written(dm, out):
    dm.setup("fit")
    write_shards(out, *dm.shard_splits(), shard_samples=2)
    return dm


def assert_same_items(a, b, keys) -> None:
    for key in keys:
        x, y = a[key], b[key]
        assert x.keys() == y.keys()
        for name in x:
            same = torch.equal(x[name], y[name]) if isinstance(x[name], torch.Tensor) else x[name] == y[name]
            assert same, (key, name)


def test_pose_shards_hold_the_same_samples_and_the_validation_json(tiny_coco, tmp_path, caplog):
    files = written(pose_dm(tiny_coco), tmp_path / "shards")
    shards = sorted((tmp_path / "shards").glob("shard-*.tar"))
    assert len(shards) == 3  # 4 train + 2 val images, 2 a shard
    with tarfile.open(shards[0]) as tar:  # plain WebDataset samples: key.extension
        assert [m.name for m in tar.getmembers()] == ["p0_000000000.jpg", "p0_000000001.jpg"]
    dm = pose_dm(tmp_path / "nowhere", shards=str(tmp_path / "shards"))
    with caplog.at_level("INFO"):
        dm.setup("fit")
    said = [r.getMessage() for r in caplog.records]  # the run says it trains from shards (issue 60)
    assert f"train: 8 samples from the shards of {tmp_path / 'shards'} (data.shards)" in said, said
    assert f"val: 4 samples from the shards of {tmp_path / 'shards'} (data.shards)" in said, said
    assert len(dm.train_set) == len(files.train_set) == 8
    assert_same_items(files.train_set, dm.train_set, KEYS)
    assert_same_items(files.val_set, dm.val_set, range(4))
    assert dm.val_annotation_file.read_bytes() == files.val_annotation_file.read_bytes()
    with pytest.raises(DataError, match="written for the keypoints"):
        pose_dm(tiny_coco, shards=str(tmp_path / "shards"), keypoints="coco_wholebody").setup("fit")
    with pytest.raises(DataError, match="holds shards already"):
        written(pose_dm(tiny_coco), tmp_path / "shards")
    index = json.loads((tmp_path / "shards" / "index.json").read_text())
    index["shards"][0] = "../../elsewhere.tar"
    (tmp_path / "shards" / "index.json").write_text(json.dumps(index))
    with pytest.raises(DataError, match="names files outside its folder"):
        pose_dm(tiny_coco, shards=str(tmp_path / "shards")).setup("fit")


def test_a_mix_keeps_its_parts_and_repeats(tiny_coco, tmp_path):
    mix = [{"root": str(tiny_coco), "ann": TRAIN_ANN, "images": "train2017", "repeat": 1.5},
           {"root": str(tiny_coco), "ann": TRAIN_ANN, "images": "train2017", "repeat": 0.5, "name": "again"}]
    files = written(pose_dm(tiny_coco, train=mix), tmp_path / "shards")
    dm = pose_dm(tiny_coco, shards=str(tmp_path / "shards"))
    dm.setup("fit")
    assert dm.train_counts == files.train_counts and len(dm.train_set) == 16
    assert_same_items(files.train_set, dm.train_set, [(i, 3) for i in (0, 11, 12, 15)])
    assert len(set(dm.train_set.groups(3))) == 4  # the two parts' images in shards of their own


def test_dense_shards_hold_the_same_samples(dense_root, tmp_path):
    def dm(**kwargs):
        return DenseTaskData(task="pointmap", root=str(dense_root), input_size=(64, 48), num_workers=0,
                               batch_size=2, **kwargs)

    files = written(dm(), tmp_path / "shards")
    shards = dm(shards=str(tmp_path / "shards"))
    shards.setup("fit")
    with tarfile.open(tmp_path / "shards" / "shard-000000.tar") as tar:
        assert {m.name.split(".", 1)[1] for m in tar.getmembers()} >= {"image.png", "depth.npy", "intrinsics.txt"}
    assert_same_items(files.train_set, shards.train_set, [(0, 1), (5, 1)])
    assert_same_items(files.val_set, shards.val_set, [0, 1])
    with pytest.raises(DataError, match="written for task 'pointmap', not 'seg'"):
        DenseTaskData(task="seg", shards=str(tmp_path / "shards")).setup("fit")


class Sharded(torch.utils.data.Dataset):
    """20 samples in 5 shards of 4."""

    def __len__(self) -> int:
        return 20

    def groups(self, epoch_seed: int) -> np.ndarray:
        return np.arange(20) // 4

    def __getitem__(self, key) -> int:
        return key[0]


@pytest.mark.parametrize("workers", [0, 2])
def test_the_shard_order_is_shard_by_shard_per_process_and_resumes(monkeypatch, workers):
    dataset = Sharded()

    def make(start=None):
        return loaders.make_loader(dataset, 2, True, workers, False, True, seed=7, start=start, groups=dataset.groups)

    seen = []
    for rank in range(2):
        monkeypatch.setattr(loaders, "_process", lambda: (rank, 2))
        whole = make()
        whole.sampler.set_epoch(3)
        expected = [batch.tolist() for batch in whole]
        order = sum(expected, [])
        shards = [i // 4 for i in order]
        assert len(order) == 10 and shards == sorted(shards, key=shards.index)  # each shard's samples together
        seen += order
        resumed = make(loaders.TrainPosition(epoch=3, batches=2))
        assert [batch.tolist() for batch in resumed] == expected[2:]
    assert sorted(seen) == list(range(20))  # the two processes share the epoch
    other = make()
    other.sampler.set_epoch(4)
    assert sum([b.tolist() for b in other], []) != order  # another epoch, another order


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:  # no line per request
        pass


@pytest.fixture
def served(tmp_path):
    """An HTTP server on this machine standing in for remote storage: (its URL, the folder it serves)."""
    folder = tmp_path / "served"
    folder.mkdir()
    handler = functools.partial(QuietHandler, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/shards", folder
    server.shutdown()


def test_shards_at_a_url_are_downloaded_once_into_the_cache(tiny_coco, tmp_path, served):
    url, folder = served
    files = written(pose_dm(tiny_coco), folder / "shards")
    cache = tmp_path / "cache"
    dm = pose_dm(tmp_path / "nowhere", shards=url, shard_cache=str(cache))
    dm.setup("fit")
    assert_same_items(files.train_set, dm.train_set, KEYS)
    downloaded = sorted(p.name for p in cache.glob("*/*") if not p.name.startswith("."))
    assert downloaded == ["index.json", "index.npz", "shard-000000.tar"]  # only the shard read (images 1, 2)
    assert json.loads((cache.glob("*/index.json").__next__()).read_text())["kind"] == "pose"
    (folder / "shards" / "shard-000000.tar").unlink()  # read from the cache from now on
    again = pose_dm(tmp_path / "nowhere", shards=url, shard_cache=str(cache))
    again.setup("fit")
    assert_same_items(files.train_set, again.train_set, KEYS[:2])
    with pytest.raises(DataError, match="cannot download"):
        pose_dm(tmp_path, shards=url + "-missing", shard_cache=str(cache)).setup("fit")


def test_the_download_cache_is_private_and_its_entries_are_checked_as_fresh_data(tiny_coco, tmp_path, served,
                                                                                  monkeypatch):
    """Issue 58, case 4: downloads go to the user's own cache (0700), not a fixed folder of the shared temporary
    folder where another user can plant a lock, a partial file or a link; a cached file is read as a handed one."""
    import os
    import stat
    import tempfile

    url, folder = served
    files = written(pose_dm(tiny_coco), folder / "shards")
    monkeypatch.setenv("SAPIENS2_FT_CACHE", str(tmp_path / "user-cache"))
    shared = tmp_path / "tmp"
    shared.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(shared))  # the machine's temporary folder: not used any more
    dm = pose_dm(tmp_path / "nowhere", shards=url)
    dm.setup("fit")
    assert_same_items(files.train_set, dm.train_set, KEYS[:2])
    [entry] = (tmp_path / "user-cache" / "shards").iterdir()
    for private in (tmp_path / "user-cache", tmp_path / "user-cache" / "shards", entry):
        assert stat.S_IMODE(private.stat().st_mode) == 0o700, private
    assert list(shared.iterdir()) == []
    # a cached shard replaced by a link (to a file of the user's): refused by name, never read through
    secret = tmp_path / "secret.tar"
    secret.write_bytes((entry / "shard-000000.tar").read_bytes())
    (entry / "shard-000000.tar").unlink()
    (entry / "shard-000000.tar").symlink_to(secret)
    linked = pose_dm(tmp_path / "nowhere", shards=url)
    linked.setup("fit")
    with pytest.raises(DataError, match="shard-000000.tar is a symbolic link"):
        linked.train_set[0]
    (entry / "shard-000000.tar").unlink()
    # a cached index naming a file outside the folder: checked as the downloaded one is
    index = json.loads((entry / "index.json").read_text())
    (entry / "index.json").write_text(json.dumps({**index, "shards": ["../../secret.tar"]}))
    with pytest.raises(DataError, match="names files outside its folder"):
        pose_dm(tmp_path / "nowhere", shards=url).setup("fit")
    # an explicit cache folder others may write to is refused, not used
    open_cache = tmp_path / "open"
    open_cache.mkdir()
    os.chmod(open_cache, 0o777)
    with pytest.raises(DataError, match=r"open is writable by others \(mode 777\)"):
        pose_dm(tmp_path / "nowhere", shards=url, shard_cache=str(open_cache)).setup("fit")


def test_a_download_above_its_limit_stops_and_leaves_nothing(tiny_coco, tmp_path, served, monkeypatch):
    url, folder = served
    written(pose_dm(tiny_coco), folder / "shards")
    monkeypatch.setenv("SAPIENS2_FT_MAX_JSON_BYTES", "100")  # the index files' limit (index.json is ~1 kB)
    with pytest.raises(DataError, match=r"index.json: more than 100 bytes, the limit for this file"):
        pose_dm(tmp_path / "nowhere", shards=url, shard_cache=str(tmp_path / "cache")).setup("fit")
    assert [p.name for p in (tmp_path / "cache").glob("*/*") if not p.name.endswith(".lock")] == []


@pytest.mark.parametrize("location", ["pipe:touch {flag}; cat {{}}", "ftp://127.0.0.1/shards"])
def test_a_shard_location_that_would_run_a_command_is_refused(tmp_path, location):
    flag = tmp_path / "PWNED"
    with pytest.raises(DataError, match="is not read"):
        pose_dm(tmp_path, shards=location.format(flag=flag)).setup("fit")
    assert not flag.exists()
