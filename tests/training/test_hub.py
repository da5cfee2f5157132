"""Pushing an export to the Hugging Face Hub, against huggingface_hub's own API with its network calls replaced: the
repository's arguments (private among them), the files of one commit (the export's own, the card naming the repo),
the end of a run pushing its export, and the Hub's refusals as one line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import huggingface_hub
import pytest
import yaml
from fake_hub import FakeHub, http_error

from sapiens2_ft import export
from sapiens2_ft.training.cli import finish_run
from sapiens2_ft.training.export_dir import export_files
from sapiens2_ft.training.hub import HubConfig, HubError
from sapiens2_ft.training.model_card import CARD_FILE, split_card

REPO = "someone/pose-demo"


@pytest.fixture
def exported(pose_run, tmp_path) -> Path:
    """A copy of the pose run's export, with a file of the user's beside the export's own."""
    directory = shutil.copytree(pose_run[1]["export"], tmp_path / "export")
    (directory / "notes.txt").write_text("not part of the model")
    return directory


def test_export_pushes_its_own_files_in_one_commit_to_a_private_repo(exported, pose_run, monkeypatch):
    hub = FakeHub(monkeypatch)
    local = (exported / CARD_FILE).read_text()
    export.main(["--checkpoint", str(exported), "--push_to_hub", REPO, "--private"])
    assert hub.repos == [{"repo_id": REPO, "repo_type": "model", "private": True, "exist_ok": True}]
    assert len(hub.commits) == 1 and hub.commits[0]["repo_id"] == REPO and hub.commits[0]["repo_type"] == "model"
    sent = set(hub.commits[0]["files"])
    assert sent == set(export_files(exported)) == {
        "config.json", "model.safetensors", "preprocessor_config.json", "keypoints.yaml", CARD_FILE,
        "LICENSE-sapiens2.md", "predictions.png"}  # not notes.txt
    assert hub.sent("model.safetensors") == (exported / "model.safetensors").read_bytes()
    meta, body = split_card(hub.sent(CARD_FILE).decode())
    assert meta["model-index"][0]["name"] == "pose-demo"
    assert f'AutoModelForPoseEstimation.from_pretrained("{REPO}")' in body
    assert pose_run[1]["export"] in local and pose_run[1]["export"] not in body.split("## Limits")[0]
    assert (exported / CARD_FILE).read_text() == local  # the local card keeps naming its folder


def test_public_unless_asked_and_the_run_pushes_its_export_at_the_end(pose_run, tmp_path, monkeypatch, capsys):
    run_dir, summary = pose_run
    run = tmp_path / "run"
    shutil.copytree(run_dir, run, ignore=shutil.ignore_patterns("wandb", "export", "last.ckpt"))
    summary = {**summary, "run_dir": str(run), "best_checkpoint": str(run / "checkpoints" / "best-step2.ckpt")}
    hub = FakeHub(monkeypatch)
    finish_run(run, summary, "val/AP", export=True, hub=HubConfig(push_to_hub=REPO))
    assert hub.repos[0]["private"] is None  # the Hub's default (public, or the organisation's setting)
    assert set(hub.commits[0]["files"]) == set(export_files(run / "export"))
    saved = json.loads((run / "summary.json").read_text())
    assert saved["hub"] == f"https://huggingface.co/{REPO}" and "uploaded to the Hugging Face Hub" in capsys.readouterr().out


@pytest.mark.parametrize("status, message", [(401, "not logged in to the Hugging Face Hub, or the token is not valid; "
                                                   "run `hf auth login`"),
                                             (403, "not allowed to write to 'someone' (a read-only token")])
def test_a_refusal_is_one_line(exported, monkeypatch, status, message):
    FakeHub(monkeypatch, status=status)
    with pytest.raises(SystemExit) as err:
        export.main(["--checkpoint", str(exported), "--push_to_hub", REPO])
    assert str(err.value).startswith(f"--push_to_hub {REPO}: ") and message in str(err.value)
    assert "\n" not in str(err.value)


def test_problems_found_before_any_work(exported, pose_run, tiny_coco, tiny_pose308_dir, monkeypatch, tmp_path):
    hub = FakeHub(monkeypatch)
    monkeypatch.setattr(huggingface_hub, "get_token", lambda: None)  # no HF_TOKEN, no stored login
    with pytest.raises(SystemExit, match="not logged in to the Hugging Face Hub; run `hf auth login`"):
        export.main(["--checkpoint", str(exported), "--push_to_hub", REPO])
    with pytest.raises(SystemExit, match="needs its namespace"):
        export.main(["--checkpoint", str(exported), "--push_to_hub", "pose-demo"])
    with pytest.raises(SystemExit, match="--private is for --push_to_hub"):
        export.main(["--checkpoint", str(exported), "--private"])
    from conftest import pose_run_args

    from sapiens2_ft.training.cli import main as train

    run_dir = tmp_path / "run"
    with pytest.raises(SystemExit) as err:  # before training: no run directory content, one message
        train(pose_run_args(tiny_coco, tiny_pose308_dir, run_dir, 4, "--hub.push_to_hub", REPO, "--export", "false"))
    assert "hub.push_to_hub uploads the run's export: it needs export: true" in str(err.value)
    assert "hub.push_to_hub: not logged in" in str(err.value) and not (run_dir / "checkpoints").exists()
    assert hub.repos == [] and hub.commits == []
    assert yaml.safe_load((exported / "keypoints.yaml").read_text())  # nothing of the export touched


@pytest.mark.parametrize("private", [True, False])
def test_the_upload_hint_of_a_refused_push_keeps_the_user_s_choices(pose_run, tmp_path, monkeypatch, private):
    """The issue: a private push that could not reach the Hub printed a command that makes a public repository."""
    run_dir, summary = pose_run
    run = tmp_path / "run"
    shutil.copytree(run_dir, run, ignore=shutil.ignore_patterns("wandb", "export", "last.ckpt"))
    summary = {**summary, "run_dir": str(run), "best_checkpoint": str(run / "checkpoints" / "best-step2.ckpt")}
    FakeHub(monkeypatch, status=503)
    with pytest.raises(HubError) as err:
        finish_run(run, summary, "val/AP", export=True, hub=HubConfig(push_to_hub=REPO, private=private))
    hint = str(err.value).splitlines()[-1]
    command = hint[hint.index("`") + 1:hint.rindex("`")]
    assert command == f"sapiens2-ft export --checkpoint {run / 'export'} --push_to_hub {REPO}" + (
        " --private" if private else "")
    hub = FakeHub(monkeypatch)  # the Hub is back: the hint, run as printed, makes the repository asked for
    export.main(command.split()[2:])
    assert hub.repos == [{"repo_id": REPO, "repo_type": "model", "private": True if private else None,
                          "exist_ok": True}]


def offline() -> Exception:
    from huggingface_hub.errors import OfflineModeIsEnabled

    return OfflineModeIsEnabled("Cannot reach https://huggingface.co/api/whoami-v2: offline mode is enabled.")


@pytest.mark.parametrize("answer, message", [
    ({"whoami_error": offline()}, "hub.push_to_hub someone/pose-demo: HF_HUB_OFFLINE is set; unset it to upload; or "
                                  "drop hub.push_to_hub and upload the export later: `sapiens2-ft export --checkpoint "
                                  "{run}/export --push_to_hub someone/pose-demo --private`"),
    ({"whoami_error": ConnectionError("[Errno 101] Network is unreachable")},
     "hub.push_to_hub someone/pose-demo: could not reach the Hugging Face Hub (ConnectionError: [Errno 101] Network is "
     "unreachable); or drop hub.push_to_hub"),
    ({"whoami_error": http_error(401, "https://huggingface.co/api/whoami-v2")},
     "not logged in to the Hugging Face Hub, or the token is not valid"),
    ({"me": {**FakeHub.ME, "auth": {"accessToken": {"role": "read"}}}}, "the token of someone is read-only"),
    ({"me": {**FakeHub.ME, "name": "other", "orgs": []}},
     "'someone' is neither your user name (other) nor one of your organisations (none)"),
])
def test_the_hub_is_asked_before_training(tiny_coco, tiny_pose308_dir, tmp_path, monkeypatch, answer, message):
    from conftest import pose_run_args

    from sapiens2_ft.training.cli import main as train

    hub = FakeHub(monkeypatch, **answer)
    run_dir = tmp_path / "run"
    with pytest.raises(SystemExit) as err:
        train(pose_run_args(tiny_coco, tiny_pose308_dir, run_dir, 4, "--hub.push_to_hub", REPO, "--hub.private", "true",
                            "--tracking.logger", "csv"))
    assert message.format(run=run_dir) in str(err.value) and hub.asked == 1
    assert not run_dir.exists()  # before any work: not even the run directory


def test_a_run_that_may_push_trains_and_pushes_privately(tiny_coco, tiny_pose308_dir, tmp_path, monkeypatch):
    from conftest import pose_run_args

    from sapiens2_ft.training.cli import main as train

    hub = FakeHub(monkeypatch, me={**FakeHub.ME, "name": "me"})  # a repository of one of the user's organisations
    summary = train(pose_run_args(tiny_coco, tiny_pose308_dir, tmp_path / "run", 2, "--hub.push_to_hub", "team/pose",
                                  "--hub.private", "true", "--tracking.logger", "csv"))
    assert hub.asked == 1 and hub.repos == [{"repo_id": "team/pose", "repo_type": "model", "private": True,
                                             "exist_ok": True}]
    assert summary["hub"] == "https://huggingface.co/team/pose" and len(hub.commits) == 1
