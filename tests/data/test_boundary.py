"""The boundary (``datamodules/boundary``) on its own: what a hostile file, folder, link, archive or URL does to
each reader and writer. The same cases through the public commands: ``tests/apps/test_untrusted_inputs.py``."""

from __future__ import annotations

import http.server
import io
import os
import stat
import subprocess
import sys
import threading
import zipfile
from pathlib import Path

import cv2
import numpy as np
import pytest
from bombs import tiff_bomb

from datamodules.boundary import urls
from datamodules.boundary.arrays import read_npy, read_npz
from datamodules.boundary.cache import private_folder, user_cache
from datamodules.boundary.files import StoredFile, read_bytes, read_json, read_yaml
from datamodules.boundary.folders import files_under, handed_file, inside
from datamodules.boundary.images import decode, header_size, read_image
from datamodules.boundary.limits import MAX_FILE_ENV, MAX_PIXELS_ENV
from datamodules.boundary.writes import copy_file, replacing, staged, write_bytes, write_text
from datamodules.errors import DataError, RefusedInput

REPO = Path(__file__).resolve().parents[2]


# ---------------------------------------------------------------------------------------------------- files


def test_a_fifo_or_a_device_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "annotations.json"
    os.mkfifo(fifo)  # no writer: a plain open() would wait for ever
    for read in (read_bytes, read_json, read_yaml):
        with pytest.raises(RefusedInput, match=r"annotations\.json: a FIFO, not a regular file"):
            read(fifo)
    with pytest.raises(RefusedInput, match="/dev/zero: a character device"):
        read_bytes("/dev/zero")  # would stream without end
    with pytest.raises(DataError, match="a FIFO"):
        read_image(fifo)


def test_a_file_above_its_limit_is_refused_before_it_is_read(tmp_path, monkeypatch):
    path = tmp_path / "big.bin"
    path.write_bytes(bytes(5000))
    monkeypatch.setenv(MAX_FILE_ENV, "4096")
    with pytest.raises(RefusedInput, match=r"big\.bin is 5,000 bytes, above the limit of 4,096 .*SAPIENS2_FT_MAX_FILE"):
        read_bytes(path)
    assert read_bytes(path, limit=5000) == bytes(5000)
    with pytest.raises(RefusedInput, match="above the limit of 10"):
        read_bytes(StoredFile("member", bytes(11)), limit=10)


def test_yaml_with_many_aliases_is_refused(tmp_path):
    laughs = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(20))
    (tmp_path / "laughs.yaml").write_text(laughs)
    with pytest.raises(RefusedInput, match="180 YAML aliases"):
        read_yaml(tmp_path / "laughs.yaml")
    (tmp_path / "fine.yaml").write_text("base: &b {x: 1}\nother: *b\n")
    assert read_yaml(tmp_path / "fine.yaml") == {"base": {"x": 1}, "other": {"x": 1}}


# ---------------------------------------------------------------------------------------------------- folders


def test_a_handed_folder_s_links_are_refused_by_name(tmp_path):
    folder, outside = tmp_path / "export", tmp_path / "token"
    (folder / "sub").mkdir(parents=True)
    outside.write_text("hf_secret")
    (folder / "config.json").write_text("{}")
    (folder / "model.safetensors").symlink_to(outside)
    (folder / "linked").symlink_to(tmp_path)
    assert handed_file(folder, "config.json") == folder / "config.json"
    with pytest.raises(RefusedInput, match=r"model\.safetensors is a symbolic link \(to .*token\)"):
        handed_file(folder, "model.safetensors")
    with pytest.raises(RefusedInput, match="linked is a symbolic link"):
        handed_file(folder, "linked/token")
    with pytest.raises(FileNotFoundError):
        handed_file(folder, "missing.json")
    assert files_under(folder) == ["config.json"]  # links are neither listed nor entered
    assert inside(folder, folder / "linked" / "token") is not None  # a path through it: inside by name...
    assert inside(folder, folder / "linked" / "token", follow_links=True) is None  # ...not where it leads


# ---------------------------------------------------------------------------------------------------- writes


def test_a_write_replaces_a_link_and_never_writes_through_it(tmp_path):
    folder, bashrc = tmp_path / "export", tmp_path / "bashrc"
    folder.mkdir()
    bashrc.write_text("the user's own")
    (folder / "onnx_config.json").symlink_to(bashrc)
    write_text(folder, "onnx_config.json", "{}")
    assert bashrc.read_text() == "the user's own"
    assert not (folder / "onnx_config.json").is_symlink() and (folder / "onnx_config.json").read_text() == "{}"
    (folder / "panels").symlink_to(tmp_path)  # a link named like a subfolder: refused, nothing written
    with pytest.raises(RefusedInput, match="panels is a symbolic link"):
        write_bytes(folder, "panels/x.png", b"png")
    assert not (tmp_path / "x.png").exists()
    for name in ("../escape.txt", "/etc/x", ""):
        with pytest.raises(RefusedInput, match="not a relative file name"):
            write_text(folder, name, "x")
    with pytest.raises(ValueError), replacing(folder, "half.bin") as temporary:  # a failed write leaves nothing
        temporary.write_bytes(b"half")
        raise ValueError
    assert sorted(p.name for p in folder.iterdir()) == ["onnx_config.json", "panels"]
    assert stat.S_IMODE((folder / "onnx_config.json").stat().st_mode) == 0o666 & ~_umask()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_staged_files_replace_links_and_copies_refuse_special_sources(tmp_path):
    folder, notes = tmp_path / "export", tmp_path / "notes.txt"
    folder.mkdir()
    notes.write_text("the user's notes")
    (folder / "model.onnx").symlink_to(notes)
    with staged(folder) as stage:
        (stage / "model.onnx").write_bytes(b"graph")
        (stage / "model.onnx.data").write_bytes(b"weights")
    assert notes.read_text() == "the user's notes" and (folder / "model.onnx").read_bytes() == b"graph"
    assert sorted(p.name for p in folder.iterdir()) == ["model.onnx", "model.onnx.data"]  # the stage is gone
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(RefusedInput, match="a FIFO"):
        copy_file(tmp_path / "fifo", folder, "copy")
    assert copy_file(notes, folder, "sub/notes.txt").read_text() == "the user's notes"


# ---------------------------------------------------------------------------------------------------- arrays


def test_an_array_whose_header_lies_is_refused_before_it_is_allocated():
    buffer = io.BytesIO()
    np.save(buffer, np.zeros((3, 4), np.float32))
    raw = buffer.getvalue()
    header_end = raw.index(b"\n") + 1
    lying = raw[:header_end].replace(b"(3, 4)", b"(100000, 100000)") + raw[header_end:]  # 40 GB declared
    with pytest.raises(DataError, match=r"declares \(100000, 100000\) float32 \(40,000,000,000 bytes\), the file "
                                        r"holds \d+$"):
        read_npy(StoredFile("normals/x.npy", lying))
    buffer = io.BytesIO()
    np.save(buffer, np.array([{"code": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(RefusedInput, match="Python objects"):
        read_npy(StoredFile("x.npy", buffer.getvalue()))
    assert read_npy(StoredFile("ok.npy", raw)).shape == (3, 4)


def test_an_npz_that_inflates_past_its_limit_is_refused(tmp_path, monkeypatch):
    bomb = tmp_path / "index.npz"
    np.savez_compressed(bomb, key=np.zeros(50_000_000, np.uint8))  # 50 MB of zeros in about 50 kB
    assert bomb.stat().st_size < 100_000
    monkeypatch.setenv(MAX_FILE_ENV, str(10_000_000))
    with pytest.raises(RefusedInput, match=r"50,000,128 bytes once inflated, above the limit of 10,000,000"):
        read_npz(bomb)
    with zipfile.ZipFile(tmp_path / "other.npz", "w") as archive:
        archive.writestr("a.npy", b"\x93NUMPY not really")
    with pytest.raises(DataError, match="not a numpy array file"):
        read_npz(tmp_path / "other.npz")


# ---------------------------------------------------------------------------------------------------- images


def test_a_tiff_read_as_the_decoder_reads_it(tmp_path, monkeypatch):
    """The first of a repeated size tag, as libtiff: a second 10x10 entry no longer hides 12000 x 12000."""
    bomb = tiff_bomb(12000, claimed=10)
    assert len(bomb) < 20_000 and header_size(bomb) == (12000, 12000)
    with pytest.raises(DataError, match="12000x12000 pixels, above the limit of 100,000,000"):
        decode(bomb, cv2.IMREAD_COLOR, "bomb.tif")
    small = tiff_bomb(64, claimed=8)
    assert header_size(small) == (64, 64) and decode(small, cv2.IMREAD_COLOR, "small.tif").shape == (64, 64, 3)
    monkeypatch.setenv(MAX_PIXELS_ENV, "4000")  # a header that passes, a decoded image that does not
    monkeypatch.setattr("datamodules.boundary.images.header_size", lambda raw: (10, 10))
    with pytest.raises(DataError, match="64x64 pixels decoded where its header said 10x10, above the limit of 4,000"):
        decode(small, cv2.IMREAD_COLOR, "lying.tif")


def test_opencv_refuses_a_lying_header_before_allocating(tmp_path):
    """Every command of ours imports the boundary before OpenCV, which sets OpenCV's own limit to ours: with the
    header reader fooled, a 12000 x 12000 TIFF is still refused, in a process that never grows by 100 MB."""
    (tmp_path / "bomb.tif").write_bytes(tiff_bomb(12000))
    code = f"""
import resource, sys
import datamodules.boundary.images as images
import cv2
start = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
images.header_size = lambda raw: (10, 10)
try:
    images.read_image({str(tmp_path / "bomb.tif")!r})
except images.DataError as err:
    print("refused:", err)
print("grew_mb", (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - start) / 1024)
"""
    env = {k: v for k, v in os.environ.items() if k != "OPENCV_IO_MAX_IMAGE_PIXELS"}
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, env=env)
    assert "refused:" in result.stdout and "above OpenCV's own limit of 100,000,000 pixels" in result.stdout, \
        result.stdout + result.stderr
    assert float(result.stdout.split("grew_mb")[1]) < 100  # decoded, it would be 432 MB (RGB)


# ---------------------------------------------------------------------------------------------------- URLs


@pytest.mark.parametrize("location", ["pipe:touch PWNED; cat {}", "PIPE:echo", "file+x://a", "ftp://host/x",
                                      "ssh://host/x", "hf://datasets/x"])
def test_only_the_listed_url_schemes_are_read(location, tmp_path):
    with pytest.raises(RefusedInput, match="is not read"):
        urls.scheme_of(location)
    assert urls.scheme_of("data/shards") is None and urls.scheme_of("file:///data/shards") is None
    assert [urls.scheme_of(u) for u in ("https://h/x", "HTTP://h/x", "s3://b/x", "gs://b/x")] == \
        ["https", "http", "s3", "gs"]


def test_a_url_template_is_plain_text_and_file_names_are_plain():
    assert urls.file_url("s3://bucket/{}?v=1", "shard-000001.tar") == "s3://bucket/shard-000001.tar?v=1"
    assert urls.file_url("https://h/{0.__class__}/", "a.tar") == "https://h/{0.__class__}/a.tar"  # no format()
    for name in ("../x.tar", ".hidden", "a/b.tar", "a b.tar"):
        with pytest.raises(RefusedInput, match="not a plain file name"):
            urls.file_url("https://h/", name)


class Redirecting(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802
        if self.path == "/big":
            self.send_response(200)
            self.end_headers()
            self.wfile.write(bytes(5000))
            return
        self.send_response(302)
        self.send_header("Location", {"/to-ftp": "ftp://127.0.0.1/x", "/to-file": "file:///etc/passwd"}.get(
            self.path, "/big"))
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def redirecting():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Redirecting)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_a_download_stops_at_its_limit_and_follows_http_redirects_only(redirecting):
    out = io.BytesIO()
    with pytest.raises(RefusedInput, match="more than 4,096 bytes"):
        urls.download(f"{redirecting}/to-big", out, 4096)
    assert urls.download(f"{redirecting}/to-big", io.BytesIO(), 5000) == 5000
    with pytest.raises(RefusedInput, match="redirected to ftp://127.0.0.1/x, which is not an http"):
        urls.download(f"{redirecting}/to-ftp", io.BytesIO(), 5000)
    with pytest.raises(DataError, match="Redirection to url 'file:///etc/passwd' is not allowed"):  # urllib's own
        urls.download(f"{redirecting}/to-file", io.BytesIO(), 5000)


def test_s3_and_gs_run_their_tool_without_a_shell(tmp_path, monkeypatch):
    """The URL is one argument of ``aws`` / ``gsutil`` (stand-ins here), never parsed by a shell."""
    for tool in ("aws", "gsutil"):
        script = tmp_path / tool
        script.write_text('#!/bin/sh\nfor a in "$@"; do printf "%s|" "$a"; done\n')
        script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    out = io.BytesIO()
    urls.download("s3://bucket/x.tar;touch PWNED", out, 1000)
    assert out.getvalue() == b"s3|cp|s3://bucket/x.tar;touch PWNED|-|" and not Path("PWNED").exists()
    out = io.BytesIO()
    urls.download("gs://bucket/$(id).tar", out, 1000)
    assert out.getvalue() == b"cat|gs://bucket/$(id).tar|"


# ---------------------------------------------------------------------------------------------------- cache


def test_the_cache_is_the_user_s_own_and_private(tmp_path, monkeypatch):
    monkeypatch.setenv("SAPIENS2_FT_CACHE", str(tmp_path / "cache"))
    folder = user_cache("shards")
    assert folder == tmp_path / "cache" / "shards" and stat.S_IMODE(folder.stat().st_mode) == 0o700
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)  # as a folder of the machine's temporary folder others can write to
    with pytest.raises(RefusedInput, match=r"shared is writable by others \(mode 777\): another user could put"):
        private_folder(shared)
    (tmp_path / "planted").symlink_to(tmp_path / "cache")
    with pytest.raises(RefusedInput, match="planted is a symbolic link"):
        private_folder(tmp_path / "planted")


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a folder to another user needs root (CI runs as root)")
def test_a_cache_folder_of_another_user_is_refused(tmp_path):
    other = tmp_path / "theirs"
    other.mkdir(mode=0o700)
    os.chown(other, 65534, 65534)
    with pytest.raises(RefusedInput, match="theirs belongs to user id 65534, not to you"):
        private_folder(other)


def test_reading_a_small_file_allocates_what_it_holds_not_the_limit(tmp_path):
    """``read_bytes`` sizes its buffer by the file, not by the 2 GiB limit (CPython allocates a read's whole size
    first: under a memory cap every read would fail), and still stops a file that grows past the limit."""
    import tracemalloc

    (tmp_path / "one").write_bytes(b"x")
    tracemalloc.start()
    try:
        assert read_bytes(tmp_path / "one") == b"x"
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20, peak
    growing = tmp_path / "growing"
    growing.write_bytes(bytes(10))
    real_fstat = os.fstat

    def fstat_before_it_grew(fd):  # the size seen when it was opened; 5,000 bytes written since
        result = real_fstat(fd)
        return os.stat_result((*result[:6], 10, *result[7:]))

    growing.write_bytes(bytes(5000))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(os, "fstat", fstat_before_it_grew)
        with pytest.raises(RefusedInput, match="more than 4,096 bytes"):
            read_bytes(growing, limit=4096)


def test_a_tool_that_writes_much_to_stderr_does_not_block_and_its_error_is_named(tmp_path, monkeypatch):
    script = tmp_path / "aws"
    script.write_text('#!/bin/sh\nhead -c 300000 /dev/zero | tr "\\\\0" e >&2\necho "An error occurred (403)" >&2\n'
                      'exit 1\n')
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    with pytest.raises(DataError, match=r"aws exited with 1: .*An error occurred \(403\)"):
        urls.download("s3://bucket/x.tar", io.BytesIO(), 1000)
