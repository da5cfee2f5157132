"""A stand-in for the Hugging Face Hub: ``HfApi.create_repo``, ``create_commit`` and ``whoami`` recorded or answered
instead of sent."""

from __future__ import annotations

import importlib
from pathlib import Path

from huggingface_hub import HfApi
from huggingface_hub.errors import HfHubHTTPError, Response


def http_error(status: int, url: str) -> HfHubHTTPError:
    http = importlib.import_module(Response.__module__.split(".")[0])
    return HfHubHTTPError(f"{status} Client Error", response=Response(status, request=http.Request("POST", url)))


class FakeHub:
    """Records what ``HfApi.create_repo`` and ``HfApi.create_commit`` are given; ``status`` makes create_repo answer
    with that HTTP error instead. ``HfApi.whoami`` answers as the Hub does for ``me`` (a write token of user
    'someone', member of 'team'), or raises ``whoami_error``."""

    ME = {"type": "user", "name": "someone", "orgs": [{"name": "team"}], "auth": {"accessToken": {"role": "write"}}}

    def __init__(self, monkeypatch, status: int | None = None, me: dict | None = None,
                 whoami_error: Exception | None = None):
        self.repos, self.commits, self.status, self.asked = [], [], status, 0
        self.me, self.whoami_error = me or self.ME, whoami_error
        monkeypatch.setenv("HF_TOKEN", "hf_not_a_real_token")  # logged in, as far as the local checks can tell
        monkeypatch.setattr(HfApi, "create_repo", self.create_repo)
        monkeypatch.setattr(HfApi, "create_commit", self.create_commit)
        monkeypatch.setattr(HfApi, "whoami", self.whoami)

    def whoami(self, *args, **kwargs):
        self.asked += 1
        if self.whoami_error is not None:
            raise self.whoami_error
        return self.me

    def create_repo(self, repo_id, **kwargs):
        if self.status is not None:
            raise http_error(self.status, "https://huggingface.co/api/repos/create")
        self.repos.append({"repo_id": repo_id, **kwargs})
        return f"https://huggingface.co/{repo_id}"

    def create_commit(self, repo_id, operations, **kwargs):
        self.commits.append({"repo_id": repo_id, **kwargs, "files": {
            op.path_in_repo: op.path_or_fileobj for op in operations}})

    def sent(self, name: str) -> bytes:
        value = self.commits[-1]["files"][name]
        return value if isinstance(value, bytes) else Path(value).read_bytes()
