"""What a published text may say of the machine that made it: a model card pushed to the Hub names no absolute
path, user or host name, token or URL credential of the run's machine. An absolute path is shortened to its last
part (``.../coco``), a URL loses its user, password, query and fragment, a token-shaped string and the user's and
the host's names are replaced; relative paths, hub ids and plain URLs stay."""

from __future__ import annotations

import getpass
import re
import socket

REDACTED = "<redacted>"
TOKEN = re.compile(r"\b(?:hf_[A-Za-z0-9]{20,}|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_\w{20,}|(?:AKIA|ASIA)[0-9A-Z]{16}"
                   r"|sk-[A-Za-z0-9_-]{20,}|xox[abpr]-[A-Za-z0-9-]{10,}|eyJ[\w-]{8,}\.[\w-]{8,}\.[\w-]{8,})")
URL = re.compile(r"\b([a-z][a-z0-9+.-]*://)([^/\s@]*@)?([^\s?#'\"`]*)(\?[^\s#'\"`]*)?(#[^\s'\"`]*)?", re.I)
ABSOLUTE = re.compile(r"(?<![\w.:/~-])(?:~|[A-Za-z]:(?=\\)|(?=/))((?:[\\/][^\s\\/'\"`,;)]+)+)[\\/]?")
SECRET_KEY = re.compile(r"(token|secret|passw(or)?d|api[_-]?key|credential)", re.I)


def _names() -> list[str]:
    """This machine's user and host names worth hiding (long enough not to hit ordinary words)."""
    names = []
    for get in (getpass.getuser, socket.gethostname, lambda: socket.gethostname().split(".")[0]):
        try:
            name = get()
        except (OSError, KeyError):
            continue
        if name and len(name) >= 3 and name not in ("root", "localhost") and name not in names:
            names.append(name)
    return sorted(names, key=len, reverse=True)


def public_text(text: str) -> str:
    """``text`` with the machine's private details taken out (module docstring)."""
    text = TOKEN.sub(REDACTED, text)
    text = URL.sub(lambda m: m.group(1) + m.group(3), text)
    text = ABSOLUTE.sub(lambda m: ".../" + re.split(r"[\\/]", m.group(1).rstrip("\\/"))[-1], text)
    for name in _names():
        text = re.sub(rf"(?<![\w-]){re.escape(name)}(?![\w-])", REDACTED, text)
    return text


def public_data(value):
    """A recipe (nested dicts and lists) with :func:`public_text` applied to each string, and the values of keys
    named like a secret replaced."""
    if isinstance(value, dict):
        return {k: REDACTED if isinstance(k, str) and SECRET_KEY.search(k) and v not in (None, "", False)
                else public_data(v) for k, v in value.items()}
    if isinstance(value, list):
        return [public_data(v) for v in value]
    return public_text(value) if isinstance(value, str) else value
