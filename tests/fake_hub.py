"""A stand-in for the Hugging Face Hub: ``HfApi.create_repo`` and ``HfApi.create_commit`` recorded instead of sent."""

from __future__ import annotations

import importlib
from pathlib import Path

from huggingface_hub import HfApi
from huggingface_hub.errors import HfHubHTTPError, Response


class FakeHub:
    """Records what ``HfApi.create_repo`` and ``HfApi.create_commit`` are given; ``status`` makes create_repo answer
    with that HTTP error instead."""

    def __init__(self, monkeypatch, status: int | None = None):
        self.repos, self.commits, self.status = [], [], status
        monkeypatch.setenv("HF_TOKEN", "hf_not_a_real_token")  # logged in, as far as the local checks can tell
        monkeypatch.setattr(HfApi, "create_repo", self.create_repo)
        monkeypatch.setattr(HfApi, "create_commit", self.create_commit)

    def create_repo(self, repo_id, **kwargs):
        if self.status is not None:
            http = importlib.import_module(Response.__module__.split(".")[0])
            request = http.Request("POST", "https://huggingface.co/api/repos/create")
            raise HfHubHTTPError(f"{self.status} Client Error", response=Response(self.status, request=request))
        self.repos.append({"repo_id": repo_id, **kwargs})
        return f"https://huggingface.co/{repo_id}"

    def create_commit(self, repo_id, operations, **kwargs):
        self.commits.append({"repo_id": repo_id, **kwargs, "files": {
            op.path_in_repo: op.path_or_fileobj for op in operations}})

    def sent(self, name: str) -> bytes:
        value = self.commits[-1]["files"][name]
        return value if isinstance(value, bytes) else Path(value).read_bytes()
