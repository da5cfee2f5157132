"""An exported model directory uploaded to a Hugging Face Hub model repository (``export --push_to_hub REPO``, and
``hub.push_to_hub`` at the end of a run): the repo is created if missing (``private`` when asked), and one commit
sends the export's own files, its model card naming the repo. What the Hub refuses is one line (``HubError``).

Before any work, the id and a login are checked here (``hub_problems``), then the Hub is asked (``hub_access_problems``:
the token is valid and may write, the namespace is the user's or one of their organisations'). A hint to upload later
(``push_command``) repeats every choice the user made (``--private``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from datamodules.errors import Refused, RefusedInput
from sapiens2_ft.training.export_dir import export_files
from sapiens2_ft.training.model_card import CARD_FILE, public_card

LOGIN_HINT = "run `hf auth login` (or set HF_TOKEN) with a token that has write access"


@dataclass
class HubConfig:
    """Where a run's export goes on the Hugging Face Hub when the run ends.

    Args:
        push_to_hub: A Hub model repository (``user/name`` or ``org/name``): the best checkpoint's export, with its
            model card, is uploaded there at the end of the run (the repo is created if missing). Needs ``hf auth
            login`` or ``HF_TOKEN`` with write access and the Hub within reach, both checked before training
            starts. null: no upload.
        private: Create the repository private (a repository that exists keeps its visibility).
    """

    push_to_hub: str | None = None
    private: bool = False


class HubError(Refused, RuntimeError):
    """The Hub refused or could not be reached; the message is one line that says what to do."""


def hub_problems(repo_id: str | None, key: str = "hub.push_to_hub") -> list[str]:
    """What can be known wrong with pushing to ``repo_id`` before any network call: its form, and a missing login."""
    if not repo_id:
        return []
    from huggingface_hub import get_token
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    try:
        validate_repo_id(repo_id)
    except HFValidationError as err:
        return [f"{key}: '{repo_id}' is not a Hub repository id ('user/name'): {err}"]
    if "/" not in repo_id:
        return [f"{key}: '{repo_id}' needs its namespace, 'user/{repo_id}' or 'org/{repo_id}'"]
    if get_token() is None:
        return [f"{key}: not logged in to the Hugging Face Hub; {LOGIN_HINT}"]
    return []


def push_command(directory: str | Path, repo_id: str, private: bool = False) -> str:
    """The command that uploads the export in ``directory`` to ``repo_id`` later, with the same choices."""
    return (f"sapiens2-ft export --checkpoint {directory} --push_to_hub {repo_id}" + (" --private" if private else ""))


def hub_access_problems(repo_id: str | None, private: bool = False, key: str = "hub.push_to_hub",
                        later: str | Path | None = None) -> list[str]:
    """What the Hub says about writing to ``repo_id``, asked before any work (``whoami``): not reachable (offline,
    ``HF_HUB_OFFLINE``), a token it refuses or that may only read, a namespace that is neither the user's nor one of
    their organisations'. Skipped ([]) where ``hub_problems`` already finds the id or the login wrong. ``later``: the
    export directory the problem's hint names, to upload it once the Hub can be reached."""
    if not repo_id or hub_problems(repo_id, key):
        return []
    from huggingface_hub import HfApi

    hint = (f"; or drop {key} and upload the export later: `{push_command(later, repo_id, private)}`"
            if later is not None else "")
    try:
        me = HfApi().whoami()
    except Exception as err:
        if not from_the_hub(err):
            raise
        return [hub_message(err, repo_id, key) + hint]
    role = ((me.get("auth") or {}).get("accessToken") or {}).get("role")
    if role == "read":
        return [f"{key} {repo_id}: the token of {me.get('name')} is read-only; {LOGIN_HINT}"]
    namespace = repo_id.split("/")[0]
    mine = {me.get("name")} | {org.get("name") for org in me.get("orgs") or []}
    if namespace not in mine:
        return [f"{key} {repo_id}: '{namespace}' is neither your user name ({me.get('name')}) nor one of your "
                f"organisations ({', '.join(sorted(n for n in mine if n != me.get('name'))) or 'none'}); give a "
                f"repository under one of them"]
    return []


def push_export(directory: str | Path, repo_id: str, private: bool = False) -> str:
    """Upload the export in ``directory`` to ``repo_id`` in one commit; returns the repository's URL."""
    from huggingface_hub import CommitOperationAdd, HfApi

    directory = Path(directory)
    problems = hub_problems(repo_id, "--push_to_hub")
    if problems:
        raise HubError(problems[0])
    if not (directory / "config.json").is_file():
        raise HubError(f"--push_to_hub: {directory} is not an exported model directory (no config.json)")
    try:  # the export's own files, nothing else; a symbolic link among them is refused, never followed
        operations = [CommitOperationAdd(path_in_repo=name, path_or_fileobj=str(directory / name))
                      for name in export_files(directory) if name != CARD_FILE]
        card = public_card(directory, repo_id)
    except RefusedInput as err:
        raise HubError(f"--push_to_hub: {err}") from None
    if card is not None:
        operations.append(CommitOperationAdd(path_in_repo=CARD_FILE, path_or_fileobj=card.encode()))
    api = HfApi()
    try:
        url = api.create_repo(repo_id, repo_type="model", private=True if private else None, exist_ok=True)
        api.create_commit(repo_id, operations, repo_type="model",
                          commit_message=f"Upload {directory.name}: Sapiens2 model fine-tuned with sapiens2-ft")
    except Exception as err:
        if not from_the_hub(err):
            raise
        raise HubError(hub_message(err, repo_id)) from None
    return str(url)


def from_the_hub(err: Exception) -> bool:
    """Whether ``err`` is huggingface_hub's or its HTTP client's (an answer of the Hub, or no way to it)."""
    package = type(err).__module__.split(".")[0]
    return isinstance(err, OSError) or package in ("huggingface_hub", "httpx", "httpx2", "httpcore", "httpcore2",
                                                   "requests", "urllib3")


def hub_message(err: Exception, repo_id: str, key: str = "--push_to_hub") -> str:
    """One line for what the Hub (or the way to it) answered to a push to ``repo_id`` (asked for by ``key``)."""
    from huggingface_hub.errors import HfHubHTTPError, OfflineModeIsEnabled

    where = f"{key} {repo_id}"
    if isinstance(err, OfflineModeIsEnabled):
        return f"{where}: HF_HUB_OFFLINE is set; unset it to upload"
    status = getattr(getattr(err, "response", None), "status_code", None) if isinstance(err, HfHubHTTPError) else None
    if status == 401:
        return f"{where}: not logged in to the Hugging Face Hub, or the token is not valid; {LOGIN_HINT}"
    if status == 403:
        namespace = repo_id.split("/")[0]
        return (f"{where}: not allowed to write to '{namespace}' (a read-only token, or a namespace that is not "
                f"yours); use a write token, or a repository under your own name")
    if status == 404:
        return f"{where}: the Hub has no namespace or repository '{repo_id}' this token can see"
    if status is not None:
        return f"{where}: the Hub answered {status}: {str(err).splitlines()[0]}"
    first = (str(err).splitlines() or [""])[0]
    return f"{where}: could not reach the Hugging Face Hub ({type(err).__name__}: {first})"
