"""Remote data: the URL schemes a recipe may name, and a download that runs no shell and stops at its limit.

Only :data:`REMOTE_SCHEMES` are read: ``https`` and ``http`` (Python's own client; redirects to those schemes
only), ``s3`` (the ``aws`` command-line tool) and ``gs`` (``gsutil``), the URL passed as one argument, never
through a shell. ``pipe:`` (a shell command), ``file:`` for a remote and every other scheme are refused before
anything runs. In a location, ``{}`` is replaced by the file name as plain text (no other braces are read).
"""

from __future__ import annotations

import re
import subprocess
import tempfile
import urllib.request
from typing import BinaryIO

from datamodules.errors import DataError, RefusedInput

REMOTE_SCHEMES = ("https", "http", "s3", "gs")
COMMANDS = {"s3": ("aws", "s3", "cp", "{url}", "-"), "gs": ("gsutil", "cat", "{url}")}
SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*):")
FILE_NAME = re.compile(r"[\w][\w.-]*")
TIMEOUT_S = 60


def scheme_of(location: str) -> str | None:
    """The URL scheme of a remote ``location``; None for a local folder (a path, or ``file://PATH``).
    ``RefusedInput`` for any scheme not in :data:`REMOTE_SCHEMES`."""
    match = SCHEME.match(str(location))
    if match is None or str(location).startswith("file://"):
        return None
    scheme = match.group(1).lower()
    if scheme not in REMOTE_SCHEMES:
        remote = ", ".join(s + "://" for s in REMOTE_SCHEMES)
        why = " (pipe: would run a shell command)" if scheme == "pipe" else ""
        raise RefusedInput(f"{location}: the scheme '{scheme}:' is not read{why}; remote data is {remote}; a local "
                           "folder whose name holds ':' is written ./NAME")
    return scheme


def file_url(location: str, name: str) -> str:
    """The URL of file ``name`` (letters, digits, ``_ . -``) in the remote folder ``location``."""
    if not FILE_NAME.fullmatch(name):
        raise RefusedInput(f"{location}: {name!r} is not a plain file name")
    return location.replace("{}", name) if "{}" in location else f"{location.rstrip('/')}/{name}"


class _SameSchemes(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):
        if SCHEME.match(newurl) is None or SCHEME.match(newurl).group(1).lower() not in ("http", "https"):
            raise RefusedInput(f"{req.full_url}: redirected to {newurl}, which is not an http(s) URL")
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def _copy(source: BinaryIO, out: BinaryIO, url: str, limit: int) -> int:
    total = 0
    while chunk := source.read(1 << 22):
        total += len(chunk)
        if total > limit:
            raise RefusedInput(f"{url}: more than {limit:,} bytes, the limit for this file; the download is stopped")
        out.write(chunk)
    return total


def download(url: str, out: BinaryIO, limit: int) -> int:
    """Write the file at ``url`` into ``out``, at most ``limit`` bytes; the bytes written. ``DataError`` when it
    cannot be fetched."""
    scheme = scheme_of(url)
    if scheme is None:
        raise RefusedInput(f"{url}: not a remote URL")
    if scheme in ("http", "https"):
        opener = urllib.request.build_opener(_SameSchemes)
        try:
            with opener.open(url, timeout=TIMEOUT_S) as response:
                return _copy(response, out, url, limit)
        except RefusedInput:
            raise
        except OSError as err:  # URLError, HTTPError, timeouts
            raise DataError(f"cannot download {url} ({type(err).__name__}: {err})") from None
    command = [url if part == "{url}" else part for part in COMMANDS[scheme]]
    with tempfile.TemporaryFile() as errors:  # not a pipe: a tool that writes much there would block on it
        try:
            process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=errors, shell=False)
        except FileNotFoundError:
            raise DataError(f"cannot download {url}: the {command[0]} command is not installed") from None
        try:
            total = _copy(process.stdout, out, url, limit)
        finally:
            process.stdout.close()  # a tool still writing gets SIGPIPE
            try:
                status = process.wait(timeout=TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                status = process.wait()
        errors.seek(0)
        error = errors.read()[-2000:].decode(errors="replace").strip()
    if status != 0:
        raise DataError(f"cannot download {url}: {command[0]} exited with {status}: {error[-300:]}")
    return total
