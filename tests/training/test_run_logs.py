"""What a run prints is what applies to it (issue 60): no Lightning advice to sync metrics that torchmetrics already
gathered across processes."""

from __future__ import annotations

import warnings

from conftest import pose_run_args
from lightning.pytorch.trainer.connectors.logger_connector import result

from sapiens2_ft.training.cli import main


def test_no_sync_dist_advice_for_metrics_gathered_across_processes(tiny_coco, tiny_pose308_dir, tmp_path):
    """The issue's DDP run printed 12 of them, one per pose metric (AP, AP50, ..., AP_body, AP_feet). DDP with one
    process: Lightning's own process group and its logging as on every rank of a larger run."""
    args = pose_run_args(tiny_coco, tiny_pose308_dir, tmp_path / "ddp", 2, "--tracking.logger", "csv", "--export",
                         "false", "--validate_first", "true")
    result.warning_cache.clear()  # Lightning says each once per process
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ddp = main(args + ["--trainer.strategy", "ddp"])
    advice = [str(w.message) for w in caught if "sync_dist=True" in str(w.message)]
    assert not advice, advice
    args[args.index("--run_dir") + 1] = str(tmp_path / "single")
    single = main(args)  # the same run without DDP: the metrics synced across (one) process are the values
    for name in ("metrics", "start_metrics"):
        assert ddp[name] == single[name] and len(ddp[name]) == 11, name  # loss, AP ... ARL


def test_the_model_s_origin_is_one_line_without_transformers_report(tiny_coco, tmp_path, capfd, caplog):
    """The issue's log: transformers' LOAD REPORT table ("MISSING ... newly initialized") for the head, right before
    the run's own "head pretrained". The load is checked by the framework (a missing backbone weight is an error), so
    its own line says where the backbone and each head row came from."""
    main(["--config", "pose_custom_cpu.yaml", "--data.root", str(tiny_coco), "--data.keypoints", "coco17",
          "--data.train_ann", "annotations/person_keypoints_train2017.json", "--data.train_images", "train2017",
          "--data.val_ann", "annotations/person_keypoints_val2017.json", "--data.val_images", "val2017",
          "--data.num_workers", "0", "--data.batch_size", "2", "--run_dir", str(tmp_path / "run"),
          "--trainer.max_steps", "1", "--trainer.val_check_interval", "1", "--validate_first", "false",
          "--tracking.logger", "csv", "--export", "false", "--trainer.enable_progress_bar", "false"])
    printed = capfd.readouterr()
    text = printed.out + printed.err + "\n" + "\n".join(r.getMessage() for r in caplog.records)  # print, logging
    assert "LOAD REPORT" not in text and "MISSING" not in text and "newly initialized" not in text
    assert "not sharded" not in text  # what transformers adds when its loading logger is quieted by level
    origin = [line.removeprefix("INFO: ") for line in text.splitlines() if "model from " in line]
    assert origin == ["model from assets/sapiens2-mini-synthetic: backbone pretrained, head pretrained: the 'pose' head "
                      "of pretraining (pretraining_heads.safetensors, 6 tensors)"], origin
