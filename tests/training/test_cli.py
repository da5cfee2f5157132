"""train.py: config lookup and merging, overrides, --print_config, and a full run's directory."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch.distributed as dist
import yaml
from conftest import pose_run_args
from pycocotools.coco import COCO

from datamodules.errors import NotFound
from sapiens2_ft.training.cli import CONFIG_DIR, main, resolve_config_args


def test_bare_config_name_resolves_to_configs_dir():
    argv = resolve_config_args(["--config", "pose_coco.yaml", "--config=pose_demo"])
    assert argv[1] == str(CONFIG_DIR / "pose_coco.yaml")
    assert argv[2] == f"--config={CONFIG_DIR / 'pose_demo.yaml'}"


def test_unknown_config_lists_known_ones():
    with pytest.raises(NotFound, match="pose_demo.yaml"):
        resolve_config_args(["--config", "no_such_recipe.yaml"])


def test_print_config_merges_configs_and_overrides(tmp_path, capsys):
    extra = tmp_path / "extra.yaml"
    extra.write_text("data:\n  batch_size: 3\n")
    with pytest.raises(SystemExit) as exited:
        main(["--config", "pose_coco.yaml", "--config", str(extra), "--trainer.max_steps", "10",
              "--model.optim.lr", "0.01", "--print_config"])
    assert exited.value.code in (0, None)
    config = yaml.safe_load(capsys.readouterr().out)
    assert config["data"]["batch_size"] == 3  # second config merged over the first
    assert config["trainer"]["max_steps"] == 10  # command-line override
    assert config["model"]["optim"]["lr"] == 0.01
    assert config["model"]["pretrained"] == "facebook/sapiens2-pose-0.4b"
    assert config["data"]["keypoints"] == "coco17"  # model.keypoints / input_size are linked from data
    assert config["data"]["input_size"] == [1024, 768]


def test_pose_coco_recipe_trains_two_steps_on_local_model_and_data(tiny_coco, tiny_pose308_dir, tmp_path,
                                                                   monkeypatch):
    run_dir = tmp_path / "run"
    summary = main([
        "--config", "pose_coco.yaml", "--run_dir", str(run_dir),
        "--model.pretrained", str(tiny_pose308_dir), "--data.root", str(tiny_coco),
        "--data.input_size", "[256, 192]", "--model.sigma", "2", "--data.batch_size", "2",
        "--data.num_workers", "0", "--trainer.max_steps", "2", "--trainer.val_check_interval", "2",
        "--trainer.accelerator", "cpu", "--trainer.devices", "1", "--trainer.enable_progress_bar", "false",
    ])
    assert summary["global_step"] == 2
    assert "transferred" in summary["model"]
    for name in ("config.yaml", "predictions.json", "summary.json", "checkpoints/last.ckpt"):
        assert (run_dir / name).exists(), name
    assert Path(summary["best_checkpoint"]).exists()
    saved = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert saved["model"]["pretrained"] == str(tiny_pose308_dir)
    on_disk = json.loads((run_dir / "summary.json").read_text())
    assert set(on_disk["metrics"]) >= {"AP", "AP50", "AP75", "APM", "APL", "AR"}
    predictions = json.loads((run_dir / "predictions.json").read_text())
    gt = COCO(str(tiny_coco / "annotations/person_keypoints_val2017.json"))
    assert len(predictions) == len(gt.getAnnIds())
    gt.loadRes(predictions)  # valid COCO results

    # A second run into the same directory is refused: the first run's files stay as they are.
    before = (run_dir / "summary.json").read_bytes()
    with pytest.raises(SystemExit, match="already holds a run"):
        main(["--config", "pose_coco.yaml", "--run_dir", str(run_dir), "--data.root", str(tiny_coco)])
    assert (run_dir / "summary.json").read_bytes() == before

    # The saved recipe holds no run directory of its own: it starts a new run.
    assert saved["run_dir"] is None and saved["resume"] is None
    from sapiens2_ft.training.run_dir import RUN_DIR_ENV
    monkeypatch.setenv(RUN_DIR_ENV, str(tmp_path / "rerun"))  # where default_run_dir puts it
    again = main(["--config", str(run_dir / "config.yaml"), "--tracking.logger", "csv", "--export", "false"])
    assert again["run_dir"] == str(tmp_path / "rerun") and again["global_step"] == 2


def test_default_run_dir_is_shared_by_ranks(monkeypatch):
    from sapiens2_ft.training.run_dir import RUN_DIR_ENV, default_run_dir

    monkeypatch.delenv(RUN_DIR_ENV, raising=False)
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "job42")
    assert default_run_dir("pose_demo") == Path("runs/pose_demo/job42")
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "other")
    assert default_run_dir("pose_demo") == Path("runs/pose_demo/job42")  # a launched child inherits it


def test_a_default_run_directory_of_the_same_second_gets_a_suffix(tmp_path, monkeypatch):
    from sapiens2_ft.training import run_dir

    monkeypatch.setattr(run_dir.time, "strftime", lambda fmt: "20261201-120000")
    assert run_dir.fresh_stamp_dir(tmp_path) == tmp_path / "20261201-120000"
    (tmp_path / "20261201-120000").mkdir()
    assert run_dir.fresh_stamp_dir(tmp_path) == tmp_path / "20261201-120000-2"
    (tmp_path / "20261201-120000-2").mkdir()
    assert run_dir.fresh_stamp_dir(tmp_path) == tmp_path / "20261201-120000-3"


def test_runs_are_named_after_the_recipe_and_the_task_read_from_any_config_form(tmp_path):
    from sapiens2_ft.training.cli import task_of
    from sapiens2_ft.training.run_dir import run_name

    assert run_name([CONFIG_DIR / "pose_coco_5b.yaml", CONFIG_DIR / "strategy" / "fsdp2.yaml"]) == "pose_coco_5b"
    saved = tmp_path / "runs" / "seg_custom" / "20261130-120000"
    (saved / "checkpoints").mkdir(parents=True)
    (saved / "config.yaml").write_text("task: seg\n")
    assert run_name([saved / "config.yaml"]) == "seg_custom"  # a rerun of a run's saved recipe
    elsewhere = tmp_path / "experiments" / "exp1"  # a run made with --run_dir experiments/exp1
    (elsewhere / "checkpoints").mkdir(parents=True)
    assert run_name([elsewhere / "config.yaml"]) == "exp1"
    assert run_name([]) == "run"
    assert task_of(["--config", str(saved / "config.yaml")]) == task_of([f"--config={saved / 'config.yaml'}"]) == "seg"


def test_resume_of_a_run_directory_without_a_checkpoint_says_so(tmp_path):
    from sapiens2_ft.training.run_dir import resolve_resume

    (tmp_path / "run" / "checkpoints").mkdir(parents=True)
    with pytest.raises(NotFound, match="holds no checkpoints/last.ckpt"):
        resolve_resume(str(tmp_path / "run"), None, "pose_coco")


def test_every_config_problem_is_reported_in_one_message_before_anything_runs(tmp_path):
    """Seven mistakes of different keys, one SystemExit that names each (no run directory made, nothing built)."""
    run_dir = tmp_path / "run"
    args = ["--config", "pose_demo.yaml", "--run_dir", str(run_dir), "--model.freeze", "half",
            "--model.lora.rank", "4", "--model.lora.target_modules", "[qkv]", "--model.frozen_dtype", "bfloat16",
            "--trainer.precision", "32-true", "--data.keypoints", "coco18", "--data.input_size", "[250, 192]",
            "--resume", "auto", "--init_from", str(tmp_path / "x.ckpt")]
    with pytest.raises(SystemExit) as exit_:
        main(args)
    message = str(exit_.value)
    assert message.startswith("7 problems in the config:")
    for expected in ("--resume continues a run and --init_from starts a new one",
                     "model.freeze: 'half' is not one of none, backbone, first_n_blocks",
                     "model.freeze: 'half' with model.lora.rank 4: LoRA already freezes",
                     "model.lora.target_modules: ['qkv'] not among the blocks' linear layers",
                     "data.input_size: [250, 192] must be two positive multiples of the patch size, 16",
                     "data.keypoints: unknown keypoint set 'coco18'",
                     "model.frozen_dtype: bfloat16 is computed under bf16-mixed autocast, but trainer.precision "
                     "is '32-true'"):
        assert f"  - {expected}" in message, expected
    assert not run_dir.exists()


def test_a_cli_built_for_another_task_than_the_config_says_is_refused(tmp_path):
    from sapiens2_ft.problems import ConfigProblems
    from sapiens2_ft.training.cli import Sapiens2CLI

    config = tmp_path / "seg.yaml"
    config.write_text("task: seg\n")  # only keys every task has: the pose parser takes it
    with pytest.raises(ConfigProblems, match="task: the config says 'seg', but PoseModule was chosen"):
        Sapiens2CLI("pose", args=["--config", str(config), "--run_dir", str(tmp_path / "r")], run=False)


def test_a_module_built_in_python_lists_its_problems_together():
    from sapiens2_ft.tasks.base import ConfigProblems
    from sapiens2_ft.tasks.matting.module import MattingModule

    with pytest.raises(ConfigProblems) as err:
        MattingModule(size="huge", loss_weights={"alpha": 1.0, "sharpness": 2.0}, freeze="first_n_blocks")
    assert len(err.value.problems) == 3
    assert "model.size: 'huge' is not one of" in str(err.value)
    assert "model.freeze_blocks: give how many blocks" in str(err.value)
    assert "model.loss_weights: unknown names ['sharpness']" in str(err.value)


def test_configs_may_instantiate_only_allowed_classes(tmp_path, monkeypatch):
    """A Lightning callback from a module outside the allowed ones (here a test helper) is refused when a
    config file names it; the environment, not the config, extends the list."""
    other = tmp_path / "other.yaml"
    other.write_text(yaml.safe_dump({"trainer": {"callbacks": [
        {"class_path": "faults.CrashAtStep", "init_args": {"step": 1}}]}}))
    args = ["--config", "pose_demo.yaml", "--config", str(other), "--run_dir", str(tmp_path / "run"), "--print_config"]
    monkeypatch.delenv("SAPIENS2_FT_ALLOW_CLASSES", raising=False)
    with pytest.raises(SystemExit, match=r"trainer.callbacks\[0\]: faults.CrashAtStep.*SAPIENS2_FT_ALLOW_CLASSES"):
        main(args[:-1])
    assert not (tmp_path / "run").exists()

    from sapiens2_ft.training.config_safety import check_class_paths

    monkeypatch.setenv("SAPIENS2_FT_ALLOW_CLASSES", "faults.")
    check_class_paths({"trainer": {"callbacks": [{"class_path": "faults.CrashAtStep"}]}})  # allowed now


def test_precision_default_follows_the_accelerator(monkeypatch):
    from sapiens2_ft.training.cli import default_precision

    monkeypatch.setattr("torch.cuda.is_available", lambda: True)
    assert default_precision("auto") == default_precision("gpu") == "bf16-mixed"
    assert default_precision("cpu") == "32-true"  # the demos on a GPU machine still train on the CPU in fp32
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    assert default_precision("auto") == "32-true"


def test_a_finished_ddp_run_takes_its_process_group_down(tiny_coco, tiny_pose308_dir, tmp_path):
    """The ranks leave together at the end (``cli.leave_process_group``): the gloo group of a one-rank DDP run is
    gone when ``main`` returns."""
    environment = dict(os.environ)  # Lightning's DDP setup exports MASTER_PORT, ...: later tests launch ranks
    try:
        summary = main(pose_run_args(tiny_coco, tiny_pose308_dir, tmp_path / "run", 2, "--trainer.strategy", "ddp",
                                     "--tracking.logger", "csv", "--export", "false"))
    finally:
        os.environ.clear()
        os.environ.update(environment)
    assert summary["global_step"] == 2 and not dist.is_initialized()


def test_a_training_set_smaller_than_a_batch_is_a_message(tiny_coco, tiny_pose308_dir, tmp_path):
    """8 people and batches of 16: the last partial batch is dropped, so the fit used to end at step 0 in silence
    and write a 'finished' run (the README's CPU path on a small export with 16 a batch)."""
    args = pose_run_args(tiny_coco, tiny_pose308_dir, tmp_path / "run", 2, "--tracking.logger", "csv",
                         "--data.batch_size", "16")
    with pytest.raises(SystemExit, match=r"^data: the training set has 8 samples \(8 per process\), fewer than "
                                         r"data.batch_size 16: .* lower data.batch_size to 8 or less"):
        main(args)
    assert not (tmp_path / "run" / "summary.json").exists()


def test_a_model_the_machine_cannot_fetch_is_one_message_before_any_work(tiny_coco, tmp_path, monkeypatch, capfd):
    """The issue: pose_custom.yaml on a machine without the Hub printed 160 lines with 4 tracebacks before its
    message, and left a run folder with a config and a wandb run."""
    from hub_cache import use_hub_cache

    use_hub_cache(monkeypatch, tmp_path / "empty-cache")
    run_dir = tmp_path / "runs" / "mine"
    with pytest.raises(SystemExit) as err:
        main(["--config", "pose_custom.yaml", "--data.root", str(tiny_coco), "--run_dir", str(run_dir)])
    message = str(err.value)
    assert message.startswith("model.pretrained: 'facebook/sapiens2-pose-0.4b' is not in this machine's Hugging Face "
                              "cache and HF_HUB_OFFLINE is set. The Sapiens2 models are gated"), message
    assert "`hf download facebook/sapiens2-pose-0.4b --local-dir DIR`" in message and "pose_custom_cpu.yaml" in message
    assert "\n" not in message and not run_dir.exists() and not (tmp_path / "runs").exists()
    printed = capfd.readouterr()
    assert "Traceback" not in printed.out + printed.err and len((printed.out + printed.err).splitlines()) <= 3
