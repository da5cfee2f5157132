"""Memory of one training step (forward + backward + AdamW step) on CPU, each case in its own process.

Model: a Sapiens2 pose model between the ``tiny`` and ``0.1b`` presets (default hidden 384, 12 layers,
6 heads, SwiGLU MLP at 4x, 17 keypoints, a light 2-deconv head), random init, float32.

(a) Activation checkpointing, off vs ``apply_activation_checkpointing(model, 1)`` (input 256x192, batch 4):

- saved bytes: the distinct, non-parameter tensor storages the autograd graph keeps for backward during
  the measured step, recorded with ``torch.autograd.graph.saved_tensors_hooks`` (with checkpointing this
  includes the block inputs each checkpoint keeps; the recomputation in backward is transient). This is
  the robust figure; also split into "in transformer blocks" vs "outside" (embeddings, head, loss);
- peak RSS delta: VmHWM during the measured step minus VmRSS before it, after a warm-up step that
  already allocated gradients and AdamW state (baseline = model + grads + optimiser). glibc is told to
  serve every allocation over 128 KiB by mmap (``MALLOC_MMAP_THRESHOLD_``) so freed memory leaves RSS.
  The peak includes recomputation, temporaries and allocator slack: noisier than the saved bytes.

  Target: checkpointing cuts the activation memory (saved bytes) by at least 60% (ratio <= 0.40).

(b) FSDP2 with 1 vs 2 ranks (gloo, CPU; ``place_model`` over ``init_device_mesh("cpu", (N,))``, one
process per rank): after one step, the bytes each rank holds locally of parameters + gradients + AdamW
state (``to_local()`` of every DTensor), as a ratio of the 1-rank figure.

  Target: each of 2 ranks holds at most 55% of the single-rank parameter + optimiser memory.

Runtime about 1.5 min on 2 busy cores (the cases run concurrently, one thread each).
Run: ``python bench/memory.py [--hidden 384 --layers 12 --heads 6 --input 256 192 --batch 4] [--skip_fsdp]``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PRESET = "bench-mid"
KEYPOINTS = [f"kp{i}" for i in range(17)]
TARGET_ACTIVATION_RATIO = 0.40  # checkpointing keeps at most 40% of the saved activations (cuts >= 60%)
TARGET_SHARD_RATIO = 0.55  # each of 2 FSDP2 ranks holds at most 55% of the single-rank state
MIB = 2**20


# ----------------------------------------------------------------------------------------------------
# shared by the worker processes


def register_preset(args) -> None:
    """Add the mid-size backbone to the preset table of this process (``build_task_model(size=PRESET)``)."""
    from sapiens2_ft.models import presets

    third = max(1, args.layers // 3)
    presets.BACKBONES[PRESET] = dict(
        hidden_size=args.hidden, num_hidden_layers=args.layers, num_attention_heads=args.heads,
        intermediate_size=4 * args.hidden, num_key_value_attention_heads=max(1, args.heads // 2),
        num_register_tokens=8, num_first_full_attention_layers=third, num_last_full_attention_layers=third,
    )


def builder(args, input_size):
    from functools import partial

    from sapiens2_ft.tasks.registry import build_task_model

    register_preset(args)
    head = dict(upsample_out_channels=[args.head_channels, args.head_channels], conv_out_channels=[args.head_channels])
    return partial(build_task_model, "pose", KEYPOINTS, input_size, size=PRESET, head=head)


def make_batch(batch: int, input_size, seed: int = 0) -> dict:
    import torch

    g = torch.Generator().manual_seed(seed)
    h, w = input_size
    keypoints = torch.rand(batch, len(KEYPOINTS), 2, generator=g) * torch.tensor([w - 1.0, h - 1.0])
    return {"image": torch.randint(0, 256, (batch, 3, h, w), generator=g, dtype=torch.uint8),
            "keypoints": keypoints, "keypoint_weights": torch.ones(batch, len(KEYPOINTS))}


def pose_loss(model, batch: dict, input_size):
    """The pose module's training loss: UDP heatmap targets, visibility-weighted MSE x 10."""
    from sapiens2_ft.models.preprocessing import normalize_images
    from sapiens2_ft.tasks.pose.codec import encode_heatmaps, input_to_heatmap_coords
    from sapiens2_ft.tasks.pose.loss import weighted_heatmap_mse

    heatmaps = model(normalize_images(batch["image"])).heatmaps
    size = tuple(heatmaps.shape[-2:])
    coords = input_to_heatmap_coords(batch["keypoints"], tuple(input_size), size)
    targets, weights = encode_heatmaps(coords, batch["keypoint_weights"], size, 2.0)
    return 10.0 * weighted_heatmap_mse(heatmaps, targets, weights)


def make_optimizer(model, layers: int):
    from sapiens2_ft.models.optim import OptimConfig, build_optimizer

    return build_optimizer(model, OptimConfig(warmup_steps=0, fused=False), layers, total_steps=100)["optimizer"]


def proc_status(field: str) -> int:
    """A ``kB`` field of /proc/self/status, in bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(field)


def reset_peak_rss() -> bool:
    """Reset VmHWM to the current RSS (Linux >= 4.0); False if not allowed."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def local_bytes(t) -> int:
    local = t.to_local() if hasattr(t, "to_local") else t
    return local.numel() * local.element_size()


# ----------------------------------------------------------------------------------------------------
# (a) one process per checkpointing setting


def worker_activations(args) -> dict:
    import torch
    from transformers.models.sapiens2.modeling_sapiens2 import Sapiens2Layer

    from sapiens2_ft.models.sharding import apply_activation_checkpointing

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    input_size = tuple(args.input)
    model, _ = builder(args, input_size)()
    model.train()
    wrapped = apply_activation_checkpointing(model, args.checkpointing)
    optimizer = make_optimizer(model, args.layers)
    batch = make_batch(args.batch, input_size)

    def step():
        loss = pose_loss(model, batch, input_size)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=False)  # keep the gradient buffers: part of the baseline
        return loss.item()

    t0 = time.perf_counter()
    step()  # warm-up: allocates gradients and AdamW state
    warm_s = time.perf_counter() - t0
    gc.collect()

    param_storages = {p.untyped_storage().data_ptr() for p in model.parameters()}
    saved: dict[int, int] = {}  # storage pointer -> bytes (distinct storages; views of one count once)
    in_blocks: dict[int, bool] = {}
    depth = [0]

    def enter(*_):
        depth[0] += 1

    def leave(*_):
        depth[0] -= 1

    blocks = [m for m in model.modules() if isinstance(m, Sapiens2Layer)]
    handles = [h for b in blocks for h in (b.register_forward_pre_hook(enter), b.register_forward_hook(leave))]

    def pack(t):
        storage = t.untyped_storage()
        ptr = storage.data_ptr()
        if ptr not in param_storages and ptr not in saved:
            saved[ptr] = storage.nbytes()
            in_blocks[ptr] = depth[0] > 0
        return t

    state_bytes = sum(local_bytes(p) for p in model.parameters())
    state_bytes += sum(local_bytes(p.grad) for p in model.parameters() if p.grad is not None)
    state_bytes += sum(local_bytes(v) for s in optimizer.state.values() for v in s.values() if torch.is_tensor(v))

    baseline = proc_status("VmRSS")
    peak_reset = reset_peak_rss()
    t0 = time.perf_counter()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = pose_loss(model, batch, input_size)
    forward_peak = proc_status("VmHWM")
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=False)
    step_s = time.perf_counter() - t0
    peak = proc_status("VmHWM")
    for h in handles:
        h.remove()
    return {
        "checkpointing": args.checkpointing, "wrapped_blocks": wrapped, "peak_reset": peak_reset,
        "baseline_rss": baseline, "peak_rss": peak, "forward_peak_rss": forward_peak,
        "saved_bytes": sum(saved.values()),
        "saved_in_blocks": sum(b for p, b in saved.items() if in_blocks[p]),
        "state_bytes": state_bytes, "params": sum(p.numel() for p in model.parameters()),
        "warm_s": warm_s, "step_s": step_s,
    }


# ----------------------------------------------------------------------------------------------------
# (b) one process per FSDP2 rank


def worker_fsdp(args) -> dict | None:
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    from sapiens2_ft.models.sharding import ScaleConfig, place_model
    from sapiens2_ft.tasks.registry import model_class

    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    try:
        mesh = init_device_mesh("cpu", (world,))
        torch.manual_seed(0)
        input_size = tuple(args.fsdp_input)
        model, _ = place_model(builder(args, input_size), model_class("pose"), ScaleConfig(), mesh=mesh)
        optimizer = make_optimizer(model, args.layers)
        batch = make_batch(args.fsdp_batch, input_size, seed=rank)
        loss = pose_loss(model, batch, input_size)
        loss.backward()
        optimizer.step()  # AdamW state exists from here on; gradients are kept (no zero_grad)

        params = sum(local_bytes(p) for p in model.parameters())
        grads = sum(local_bytes(p.grad) for p in model.parameters() if p.grad is not None)
        optim = sum(local_bytes(v) for s in optimizer.state.values() for v in s.values() if torch.is_tensor(v))
        full = sum(p.numel() * p.element_size() for p in model.parameters())  # global (unsharded) sizes
        mine = {"rank": rank, "params": params, "grads": grads, "optim": optim, "full_param_bytes": full,
                "sharded": sum(hasattr(p, "to_local") for p in model.parameters()),
                "num_params": sum(1 for _ in model.parameters())}
        everyone = [None] * world
        dist.all_gather_object(everyone, mine)
        return {"world": world, "ranks": everyone} if rank == 0 else None
    finally:
        dist.destroy_process_group()


# ----------------------------------------------------------------------------------------------------
# driver


def worker_args(args) -> list[str]:
    return ["--hidden", str(args.hidden), "--layers", str(args.layers), "--heads", str(args.heads),
            "--head_channels", str(args.head_channels), "--input", *map(str, args.input),
            "--batch", str(args.batch), "--fsdp_input", *map(str, args.fsdp_input),
            "--fsdp_batch", str(args.fsdp_batch), "--threads", str(args.threads)]


def child_env(extra: dict | None = None) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
           "MALLOC_MMAP_THRESHOLD_": "131072", "MALLOC_TRIM_THRESHOLD_": "131072"}
    env.update(extra or {})
    return env


def last_json(stdout: str):
    for line in reversed(stdout.strip().splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise RuntimeError("worker printed no result")


def launch(cmd: list[str], env: dict) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, __file__, *cmd], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def collect(procs: list[subprocess.Popen], what: str, timeout: float) -> dict:
    """Wait for a group of workers; the result is the JSON line of the first one."""
    outputs = []
    try:
        for p in procs:
            outputs.append(p.communicate(timeout=timeout))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    for p, (_, err) in zip(procs, outputs):
        if p.returncode != 0:
            raise RuntimeError(f"{what} worker failed:\n{err[-3000:]}")
    return last_json(outputs[0][0])


def start_activations(args, every: int) -> list[subprocess.Popen]:
    return [launch(["--_worker", "activations", "--checkpointing", str(every), *worker_args(args)], child_env())]


def start_fsdp(args, world: int) -> list[subprocess.Popen]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return [launch(["--_worker", "fsdp", *worker_args(args)],
                   child_env({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": str(rank),
                              "WORLD_SIZE": str(world), "LOCAL_RANK": str(rank)}))
            for rank in range(world)]


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, default=384)
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--heads", type=int, default=6)
    parser.add_argument("--head_channels", type=int, default=128, help="channels of the pose head's layers")
    parser.add_argument("--input", type=int, nargs=2, default=[256, 192], metavar=("H", "W"))
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--fsdp_input", type=int, nargs=2, default=[128, 96], metavar=("H", "W"),
                        help="input of the FSDP2 step (only parameter/optimiser memory is measured there)")
    parser.add_argument("--fsdp_batch", type=int, default=1, help="per-rank batch of the FSDP2 step")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per process")
    parser.add_argument("--skip_fsdp", action="store_true")
    parser.add_argument("--skip_checkpointing", action="store_true")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per worker process")
    parser.add_argument("--_worker", choices=["activations", "fsdp"], help=argparse.SUPPRESS)
    parser.add_argument("--checkpointing", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args._worker == "activations":
        print(json.dumps(worker_activations(args)))
        return
    if args._worker == "fsdp":
        result = worker_fsdp(args)
        if result is not None:
            print(json.dumps(result))
        return

    start = time.perf_counter()
    h, w = args.input
    print(f"pose model: hidden {args.hidden}, {args.layers} layers, {args.heads} heads, head {args.head_channels} ch, "
          f"float32, {args.threads} thread(s) per process; every case in its own process(es), run concurrently")
    # All worker groups at once: peaks are per process, so they do not mix, and the wall time halves.
    groups = {}
    if not args.skip_checkpointing:
        groups["off"], groups["on"] = start_activations(args, 0), start_activations(args, 1)
    if not args.skip_fsdp:
        groups["world1"], groups["world2"] = start_fsdp(args, 1), start_fsdp(args, 2)
    results = {name: collect(procs, name, args.timeout) for name, procs in groups.items()}

    if not args.skip_checkpointing:
        off, on = results["off"], results["on"]
        print(f"(a) activation checkpointing, input {h}x{w}, batch {args.batch}, {off['params'] / 1e6:.1f}M params, "
              f"model+grads+AdamW {off['state_bytes'] / MIB:.0f} MiB; blocks wrapped: {on['wrapped_blocks']}")
        for r, label in ((off, "off"), (on, "on ")):
            outside = r["saved_bytes"] - r["saved_in_blocks"]
            print(f"  checkpointing {label}: saved for backward {r['saved_bytes'] / MIB:7.1f} MiB "
                  f"(inside blocks {r['saved_in_blocks'] / MIB:6.1f}, outside {outside / MIB:5.1f})"
                  f" | peak RSS over baseline {(r['peak_rss'] - r['baseline_rss']) / MIB:7.1f} MiB "
                  f"(end of forward {(r['forward_peak_rss'] - r['baseline_rss']) / MIB:6.1f})")
        saved_ratio = on["saved_bytes"] / off["saved_bytes"]
        block_ratio = on["saved_in_blocks"] / max(1, off["saved_in_blocks"])
        rss_ratio = (on["peak_rss"] - on["baseline_rss"]) / max(1, off["peak_rss"] - off["baseline_rss"])
        if not (off["peak_reset"] and on["peak_reset"]):
            print("  note: could not reset VmHWM (/proc/self/clear_refs); peak RSS includes the warm-up step")
        print("  ('outside' = embeddings, head, loss, and with checkpointing the block inputs each checkpoint keeps)")
        for what, ratio in (("saved for backward, whole step:  ", saved_ratio),
                            ("saved for backward, inside blocks:", block_ratio),
                            ("peak RSS over baseline:          ", rss_ratio)):
            print(f"  ratio on/off, {what} {ratio:.3f}  (cut {100 * (1 - ratio):.1f}%)")
        print(f"target (a) checkpointing cuts activation memory (saved bytes) by >= "
              f"{100 * (1 - TARGET_ACTIVATION_RATIO):.0f}%: ratio {saved_ratio:.3f} "
              f"{verdict(saved_ratio <= TARGET_ACTIVATION_RATIO)}")
        print(f"target (a') the same on the peak RSS delta (noisier): ratio {rss_ratio:.3f} "
              f"{verdict(rss_ratio <= TARGET_ACTIVATION_RATIO)}")

    if not args.skip_fsdp:
        fh, fw = args.fsdp_input
        single, double = results["world1"], results["world2"]
        total = lambda r: r["params"] + r["grads"] + r["optim"]  # noqa: E731
        ref = single["ranks"][0]
        print(f"(b) FSDP2 (gloo, CPU), one step at {fh}x{fw}, per-rank batch {args.fsdp_batch}; "
              f"full parameters {ref['full_param_bytes'] / MIB:.1f} MiB, x4 with grads and AdamW "
              f"= {4 * ref['full_param_bytes'] / MIB:.1f} MiB")
        worst = 0.0
        for result in (single, double):
            for r in result["ranks"]:
                ratio = total(r) / total(ref)
                if result["world"] == 2:
                    worst = max(worst, ratio)
                print(f"  world {result['world']} rank {r['rank']}: params {r['params'] / MIB:6.1f} + grads "
                      f"{r['grads'] / MIB:6.1f} + AdamW {r['optim'] / MIB:6.1f} = {total(r) / MIB:6.1f} MiB local "
                      f"({r['sharded']}/{r['num_params']} params are DTensors); ratio to 1 rank {ratio:.3f}")
        spread = sum(total(r) for r in double["ranks"]) / total(ref)
        print(f"  sum over the 2 ranks / 1 rank: {spread:.3f}")
        print(f"target (b) each of 2 ranks holds <= {100 * TARGET_SHARD_RATIO:.0f}% of the 1-rank "
              f"params+grads+AdamW: max ratio {worst:.3f} {verdict(worst <= TARGET_SHARD_RATIO)}")
    print(f"total time {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
