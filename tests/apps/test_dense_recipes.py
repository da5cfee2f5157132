"""Dense recipes: every config parses, and each ``*_custom.yaml`` trains on a local stand-in of its
released checkpoint (a tiny model saved with ``save_pretrained``) and a user-layout folder."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml
from transformers import Sapiens2HeadConfig

from datamodules.body_parts import SAPIENS2_PART_CLASSES
from sapiens2_ft.tasks.registry import TASKS, model_class
from sapiens2_ft.training.cli import CONFIG_DIR, main
from conftest import tiny_pose_config

RELEASED = {"seg": "facebook/sapiens2-seg-0.4b", "normal": "facebook/sapiens2-normal-0.4b",
            "pointmap": "facebook/sapiens2-pointmap-0.4b", "matting": "facebook/sapiens2-matting-1b"}
SHUFFLE = dict(use_pixel_shuffle=True, upsample_kernel_size=3, upsample_out_channels=[16, 16], conv_out_channels=[8])


@pytest.mark.parametrize("config", sorted(p.name for p in CONFIG_DIR.glob("*.yaml")))
def test_every_config_parses(config, capsys):
    with pytest.raises(SystemExit) as done:
        main(["--config", config, "--print_config"])
    assert done.value.code in (0, None)
    parsed = yaml.safe_load(capsys.readouterr().out)
    task = yaml.safe_load((CONFIG_DIR / config).read_text())["task"]
    assert parsed["task"] == task
    if task in RELEASED and config.endswith("_custom.yaml"):
        assert parsed["model"]["pretrained"] == RELEASED[task]


def _released_stand_in(task: str, out: Path) -> Path:
    labels = SAPIENS2_PART_CLASSES if task == "seg" else TASKS[task].model.outputs
    config = tiny_pose_config(len(labels))
    head = dict(upsample_out_channels=[16, 16], conv_out_channels=[16]) if task == "seg" else dict(SHUFFLE)
    if task == "pointmap":
        head.update(scale_conv_out_channels=[16, 8], scale_conv_kernel_size=3, scale_final_hidden_sizes=[16, 8])
    config.head_config = Sapiens2HeadConfig(**head)
    config.head_config._init_scale_final_input_size(config.image_size, config.patch_size)
    if task == "seg":
        config.id2label = dict(enumerate(labels))
    model_class(task)(config).save_pretrained(out)
    return out


@pytest.mark.parametrize("task", list(RELEASED))
def test_custom_recipe_trains_two_steps(task, dense_root, tmp_path):
    run_dir = tmp_path / "run"
    summary = main([
        "--config", f"{task}_custom.yaml", "--run_dir", str(run_dir),
        "--model.pretrained", str(_released_stand_in(task, tmp_path / "model")), "--data.root", str(dense_root),
        "--data.input_size", "[256, 192]", "--data.batch_size", "2", "--data.num_workers", "0",
        "--trainer.max_steps", "2", "--trainer.val_check_interval", "2", "--trainer.accelerator", "cpu",
        "--trainer.devices", "1", "--trainer.enable_progress_bar", "false",
    ])
    assert summary["global_step"] == 2
    assert "backbone pretrained, head pretrained" in summary["model"]
    assert summary["monitor"].removeprefix("val/") in summary["metrics"]
    assert all(np.isfinite(v) for v in summary["metrics"].values())
    assert (run_dir / "checkpoints" / "last.ckpt").exists() and any((run_dir / "predictions").iterdir())


def test_num_classes_alone_sets_the_models_class_set(dense_root, tmp_path, capsys):
    from sapiens2_ft.training.cli import Sapiens2CLI, resolve_config_args

    def build(*extra):
        args = resolve_config_args(["--config", "seg_custom.yaml", "--model.pretrained", "null", "--model.size", "tiny",
                                    "--data.root", str(dense_root), "--run_dir", str(tmp_path / "run"),
                                    "--tracking.logger", "csv", *extra])
        return Sapiens2CLI("seg", args=args, run=False, save_config_callback=None, auto_configure_optimizers=False)

    cli = build("--data.num_classes", "5")
    assert cli.model.class_names == cli.datamodule.class_names == [f"class_{i}" for i in range(5)]
    assert cli.model.val_metrics.num_classes == 5
    with pytest.raises(SystemExit):
        build("--data.num_classes", "5", "--data.class_names", "[skin, hair]")
    assert "data.class_names has 2 names for data.num_classes=5" in capsys.readouterr().err
