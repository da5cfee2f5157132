"""Scale: FSDP2 and DDP with 2 CPU processes (gloo), activation checkpointing, meta-device builds."""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import distributed_fit
import forked

from sapiens2_ft.models.sharding import apply_activation_checkpointing, transformer_blocks
from sapiens2_ft.tasks.registry import build_task_model

REPO = Path(__file__).resolve().parents[2]
TOLERANCE = 1e-5  # float32 reductions in another order (two half-batches + all-reduce) differ in the last bits


def run_job(cmd: list[str], cwd: Path, env: dict, timeout: int = 600) -> subprocess.CompletedProcess:
    """Run a (possibly multi-process) command in its own process group; on timeout kill the whole group,
    so ranks that Lightning launched do not outlive a hung test."""
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"timed out after {timeout} s: {' '.join(cmd)}\n{err[-3000:]}")
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def _fit(runs: Path, name: str, *args: str) -> dict:
    """tests/distributed_fit.py, its process or its ranks forked (tests/forked.py), not started by Lightning."""
    argv = ["--out", str(runs / name), *args]
    devices = int(args[args.index("--devices") + 1])
    with torch.random.fork_rng(devices=[]):  # this process's random state stays as it was
        distributed_fit.write_init(runs / "init")
    if devices == 1:
        done = forked.Forked(distributed_fit.main, (argv,), runs / f"{name}_logs", cwd=runs).wait(timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
    else:
        forked.start_ranks(forked.as_rank, (devices, forked.free_port(), distributed_fit.main, (argv,), runs / name),
                           nprocs=devices)
    return json.loads((runs / name / "result.json").read_text())


def saved_beyond_parameters(model: torch.nn.Module, x: torch.Tensor) -> int:
    """Bytes autograd saves for backward in ``model(x)``, less the parameters it saves as they are (no memory of
    their own)."""
    storages = {p.untyped_storage().data_ptr() for p in model.parameters()}
    saved = []

    def pack(t):
        if t.untyped_storage().data_ptr() not in storages:
            saved.append(t.numel() * t.element_size())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(x)
    return sum(saved)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("distributed")


@pytest.fixture(scope="module")
def single(runs) -> dict:
    return _fit(runs, "single", "--devices", "1", "--steps", "3")


@pytest.mark.distributed
def test_fsdp2_two_ranks_shard_match_single_process_and_resume(runs, single):
    first = _fit(runs, "fsdp2", "--devices", "2", "--strategy", "fsdp2", "--steps", "3", "--stop_after", "2")
    total = single["ranks"][0]["total"]
    for rank in first["ranks"]:  # every block and the root sharded: each rank holds about half
        assert rank["total"] == total and 0.45 * total < rank["held"] < 0.55 * total
    assert sum(r["held"] for r in first["ranks"]) == total
    assert first["global_step"] == 2 and first["checkpoint_is_dir"]  # a distributed (sharded) checkpoint
    assert first["losses"] == pytest.approx(single["losses"][:2], abs=TOLERANCE)

    resumed = _fit(runs, "fsdp2_resumed", "--devices", "2", "--strategy", "fsdp2", "--steps", "3",
                   "--resume", first["checkpoint"])
    assert resumed["global_step"] == 3 and len(resumed["losses"]) == 1
    # weights, AdamW moments and the lr schedule all came back: step 3 is the uninterrupted one
    assert resumed["losses"][0] == pytest.approx(single["losses"][2], abs=TOLERANCE)


@pytest.mark.distributed
def test_multitask_pretraining_shards_with_fsdp2_like_ddp(runs, dense_root):
    """The demo pretraining's module (five heads on one backbone) on 2 ranks: FSDP2 holds half of every
    parameter on each rank and follows DDP's replicated run (the same per-rank batches, gradients averaged)."""
    args = ("--devices", "2", "--steps", "2", "--task", "multitask", "--data_root", str(dense_root))
    ddp = _fit(runs, "multitask_ddp", *args, "--strategy", "ddp")
    sharded = _fit(runs, "multitask_fsdp2", *args, "--strategy", "fsdp2")
    total = ddp["ranks"][0]["total"]
    for rank in sharded["ranks"]:
        assert rank["total"] == total and 0.45 * total < rank["held"] < 0.55 * total
    assert sum(r["held"] for r in sharded["ranks"]) == total and ddp["ranks"][0]["held"] == total
    assert sharded["checkpoint_is_dir"] and sharded["global_step"] == 2
    assert len(ddp["losses"]) == 2 and ddp["losses"][1] < ddp["losses"][0]
    assert sharded["losses"] == pytest.approx(ddp["losses"], rel=TOLERANCE)


@pytest.mark.parametrize("freeze,lora", [("none", 4), ("backbone", 0), ("first_n_blocks", 0)])
def test_memory_estimate_with_lora_or_freezing_matches_measured_on_cpu(freeze, lora):
    """Gradients and AdamW state only for what trains; activations of a LoRA model or a partly frozen one
    against the bytes autograd saves for it on the CPU (fp32, no checkpointing)."""
    from sapiens2_ft.memory import Setup, estimate
    from sapiens2_ft.models.adapters import LoraOptions, adapt

    options = LoraOptions(rank=lora, alpha=8.0)
    setup = Setup(task="seg", size="tiny", num_labels=29, input_size=(256, 192), batch_size=3, world_size=1,
                  strategy="single", bf16=False, checkpoint_every=0, cpu_offload=False, freeze=freeze,
                  freeze_blocks=2, lora=options)
    est = estimate(setup)
    torch.manual_seed(0)
    model, _ = build_task_model("seg", [f"c{i}" for i in range(29)], (256, 192), size="tiny")
    adapt(model, freeze, 2, options)
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert est.trainable_params == trainable < est.num_params
    assert est.grads == 4 * trainable and est.optimizer == 8 * trainable and est.params == 4 * est.num_params
    saved = saved_beyond_parameters(model, torch.randn(3, 3, 256, 192))
    # as for full fine-tuning: the embeddings and final norm are left out of the estimate
    assert est.activations == pytest.approx(saved, rel=0.10), (est.activations, saved)


@pytest.mark.distributed
def test_fsdp2_with_lora_checkpointing_and_compiled_blocks_matches_one_eager_process(runs):
    """LoRA adapters and frozen base weights under FSDP2 + activation checkpointing + regional compilation
    (``aot_eager``: dynamo's graphs without inductor's code generation): the losses of one eager process, and
    the sharded checkpoint loads as a plain model with the adapters merged in."""
    from sapiens2_ft.models.adapters import LoraOptions
    from sapiens2_ft.models.checkpoints import load_model
    from sapiens2_ft.tasks.registry import model_class

    lora = ["--steps", "3", "--lora", "4", "--checkpointing", "1"]
    one = _fit(runs, "lora_single", "--devices", "1", *lora)
    two = _fit(runs, "lora_fsdp2", "--devices", "2", "--strategy", "fsdp2", "--compile", "aot_eager", *lora)
    # The last bits of the two reductions' orders grow over the steps (measured 2.2e-5 at step 3, relative 1.2e-5).
    assert two["checkpoint_is_dir"] and two["losses"] == pytest.approx(one["losses"], rel=1e-4)
    assert one["losses"][-1] < one["losses"][0]  # the adapters and head learn
    merged, _ = load_model(two["checkpoint"], model_class)
    reference, _ = load_model(one["checkpoint"], model_class)
    assert not any("lora" in k or "base_layer" in k for k in merged.state_dict())
    # The merged layers (W + alpha / r x B A) agree. (Not the head's conv bias before a BatchNorm: its gradient
    # is float noise, which AdamW scales to lr-sized steps of either sign.)
    targets = LoraOptions().target_modules
    merged_layers = [k for k in reference.state_dict() if k.endswith(".weight") and k.split(".")[-2] in targets]
    assert len(merged_layers) == 4 * 7  # blocks x linear layers
    for key in merged_layers:
        torch.testing.assert_close(merged.state_dict()[key], reference.state_dict()[key], rtol=1e-4, atol=1e-6)


@pytest.mark.distributed
def test_ddp_two_ranks_match_single_process(runs, single):
    ddp = _fit(runs, "ddp", "--devices", "2", "--strategy", "ddp", "--steps", "3")
    assert all(r["held"] == r["total"] for r in ddp["ranks"])  # full replicas
    assert ddp["losses"] == pytest.approx(single["losses"], abs=TOLERANCE)


def _loss_grads_and_saved_bytes(every: int):
    torch.manual_seed(0)
    model, _ = build_task_model("pose", [f"k{i}" for i in range(17)], (256, 192), size="tiny")
    wrapped = apply_activation_checkpointing(model, every)
    x = torch.randn(4, 3, 256, 192, generator=torch.Generator().manual_seed(1))
    saved = []

    def pack(t):
        saved.append(t.numel() * t.element_size())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = model(x).heatmaps.pow(2).mean()
    loss.backward()
    # parameter names gain the wrapper's "_checkpoint_wrapped_module."; state-dict keys do not
    grads = {n.replace("_checkpoint_wrapped_module.", ""): p.grad.clone() for n, p in model.named_parameters()}
    assert set(model.state_dict()) >= set(grads)
    return loss.detach(), grads, sum(saved), wrapped


def test_activation_checkpointing_same_loss_and_grads_fewer_saved_tensors():
    loss, grads, saved, _ = _loss_grads_and_saved_bytes(0)
    loss_ac, grads_ac, saved_ac, wrapped = _loss_grads_and_saved_bytes(1)
    assert wrapped == 4
    torch.testing.assert_close(loss_ac, loss)
    assert grads_ac.keys() == grads.keys()
    for name in grads:
        torch.testing.assert_close(grads_ac[name], grads[name], rtol=1e-4, atol=1e-6)
    assert saved_ac < 0.5 * saved, (saved_ac, saved)
    _, _, saved_half, wrapped_half = _loss_grads_and_saved_bytes(2)
    assert wrapped_half == 2 and saved_ac < saved_half < saved


def test_5b_builds_on_meta_without_memory_and_matches_the_paper_count():
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    with torch.device("meta"):
        model, _ = build_task_model("pose", [f"k{i}" for i in range(308)], (1024, 768), size="5b")
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert all(p.is_meta for p in model.parameters())
    backbone = sum(p.numel() for p in model.model.parameters())
    assert backbone == pytest.approx(5.071e9, rel=0.01)
    assert len(transformer_blocks(model)) == 56
    assert grown_mb < 500, f"peak RSS grew {grown_mb:.0f} MB (fp32 weights would be 20 GB)"


def test_memory_estimate_matches_measured_activations_on_cpu():
    """The estimator's activations (one block measured, times depth and batch, plus the head) against
    the bytes autograd saves for the whole model on the CPU, fp32, with and without checkpointing."""
    from sapiens2_ft.memory import Setup, estimate

    setup = Setup(task="seg", size="tiny", num_labels=29, input_size=(256, 192), batch_size=3, world_size=1,
                  strategy="single", bf16=False, checkpoint_every=1, cpu_offload=False)
    est = estimate(setup)
    measured = {}
    for every in (0, 1):
        torch.manual_seed(0)
        model, _ = build_task_model("seg", [f"c{i}" for i in range(29)], (256, 192), size="tiny")
        apply_activation_checkpointing(model, every)
        measured[every] = saved_beyond_parameters(model, torch.randn(3, 3, 256, 192))
    # off by the embeddings and final norm, which the estimate leaves out: within 10%
    assert est.activations == pytest.approx(measured[0], rel=0.10)
    # the estimate adds one block's recomputation (live during backward), which saved bytes do not show
    assert measured[1] < est.activations_checkpointed < 2 * measured[1]
    assert est.params == est.grads == 4 * est.num_params and est.optimizer == 8 * est.num_params


@pytest.mark.distributed
def test_train_py_with_the_fsdp2_config_piece(dense_root, tmp_path):
    """The CLI path: a recipe plus ``strategy/fsdp2.yaml`` on 2 CPU processes (Lightning launches rank 1)."""
    run_dir = tmp_path / "run"
    cmd = [sys.executable, "train.py", "--config", "seg_demo.yaml", "--config", "strategy/fsdp2.yaml",
           "--run_dir", str(run_dir), "--data.root", str(dense_root), "--data.synthetic", "null",
           "--data.batch_size", "2", "--data.num_workers", "0", "--trainer.devices", "2",
           "--trainer.max_steps", "2", "--trainer.val_check_interval", "2", "--trainer.enable_progress_bar", "false",
           "--checkpoint_every_n_steps", "1"]  # a sharded step checkpoint at 1; the validation one at 2
    env = {**os.environ, "OMP_NUM_THREADS": "1"}  # two ranks on two cores
    done = run_job(cmd, REPO, env)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["global_step"] == 2 and "mIoU" in summary["metrics"]
    assert (run_dir / "checkpoints" / "last.ckpt").is_dir()  # distributed checkpoint: one shard per rank
    assert "step 1: last.ckpt written (checkpoint_every_n_steps: 1)" in done.stderr  # by both ranks, together
    assert "step 2: last.ckpt written" not in done.stderr  # the validation's checkpoint
    assert "backbone pretrained, head pretrained" in summary["model"]  # the recipe's model.pretraining_head
    assert "the 'seg' head of pretraining" in summary["model"]

    # The end-of-fit export consolidated the sharded best checkpoint; torch's own converter agrees.
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
    from transformers import AutoModelForSemanticSegmentation

    exported = AutoModelForSemanticSegmentation.from_pretrained(summary["export"])
    dcp_to_torch_save(summary["best_checkpoint"], tmp_path / "whole.pt")
    whole = torch.load(tmp_path / "whole.pt", weights_only=True)["state_dict"]
    reference = {k[len("model."):].replace("_checkpoint_wrapped_module.", ""): v for k, v in whole.items()}
    exported_state = exported.state_dict()
    assert set(exported_state) == set(reference)
    for key, value in exported_state.items():
        assert torch.equal(value, reference[key]), key


def test_memory_cli_reads_the_recipe_like_train_py():
    from sapiens2_ft.memory import Estimate, report, setup_from_config

    setup = setup_from_config(["--config", "pose_coco_5b.yaml", "--data.batch_size", "3"], world_size=8)
    assert (setup.task, setup.size, setup.num_labels, setup.input_size) == ("pose", "5b", 17, (1024, 768))
    assert (setup.batch_size, setup.world_size, setup.strategy) == (3, 8, "fsdp2")
    assert setup.bf16 and setup.checkpoint_every == 1 and not setup.cpu_offload
    assert setup_from_config(["--config", "seg_custom.yaml"], world_size=2).strategy == "ddp"
    gib = 2**30
    text = report(setup, Estimate(params=gib, grads=gib, optimizer=2 * gib, buffers=0, activations=100 * gib,
                                  activations_checkpointed=10 * gib, num_params=10**9), device_memory_gb=80)
    assert "total without checkpointing   104.00 GiB -> does NOT fit" in text
    assert "total with    checkpointing    14.00 GiB -> fits" in text
    # a LoRA recipe under bf16-mixed stores its frozen weights in bf16 (model.frozen_dtype: auto)
    lora = setup_from_config(["--config", "pose_coco_5b_lora.yaml"], world_size=1)
    assert lora.frozen_dtype == "bfloat16" and lora.lora.rank == 16
    fp32 = setup_from_config(["--config", "pose_coco_5b_lora.yaml", "--model.frozen_dtype", "float32"], world_size=1)
    assert fp32.frozen_dtype == "float32"


def test_memory_help_documents_its_own_flags(capsys):
    from sapiens2_ft import memory

    with pytest.raises(SystemExit) as done:
        memory.main(["--help"])
    out = capsys.readouterr().out
    assert done.value.code == 0
    for flag in ("--world_size", "--device_memory_gb", "--activation_checkpointing", "--batch_table", "train.py"):
        assert flag in out, flag
