"""GPU checks driven by ``bench/gpu_check.sh``: training throughput + MFU, and FSDP2 peak memory.

``throughput``: a ``PoseModule(size=...)`` model (random init, no download) trained by a plain loop
(bf16 autocast over float32 weights, fused AdamW from ``build_optimizer``, the module's heatmap loss),
``--warmup`` untimed steps then ``--steps`` timed ones. Prints images/s and the model FLOPs
utilisation, MFU = training FLOPs per second / ``--peak_tflops``, with the FLOPs of one step from two
sources:

- counted: ``torch.utils.flop_counter.FlopCounterMode`` over one forward + backward (matmuls, convs,
  transposed convs and SDPA, forward and backward; elementwise ops and the optimiser are not counted);
- formula: 6 x (transformer-block parameters) x tokens + 12 x layers x tokens^2 x hidden per image
  (attention scores and values, forward + backward), tokens = (H/16)(W/16) + 1 + registers; the conv
  head is not in the formula.

``fsdp-memory``: ``place_model`` over a device mesh of all ranks (FSDP2: every block and the root
sharded, bf16 compute, float32 reduce), activation checkpointing on every block, fused AdamW, a few
steps; prints the peak GPU memory (allocated and reserved) per rank. Run it under
``python -m torch.distributed.run --nproc_per_node=N`` for N GPUs; started directly it is 1 rank.

``--device cpu`` runs either check on the CPU (tiny sizes; gloo) as a smoke test of the code path.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import time

GIB = 2**30


def make_batch(batch: int, input_size, num_keypoints: int, device):
    import torch

    g = torch.Generator().manual_seed(0)
    h, w = input_size
    keypoints = torch.rand(batch, num_keypoints, 2, generator=g) * torch.tensor([w - 1.0, h - 1.0])
    out = {"image": torch.randint(0, 256, (batch, 3, h, w), generator=g, dtype=torch.uint8),
           "keypoints": keypoints, "keypoint_weights": torch.ones(batch, num_keypoints)}
    return {k: v.to(device) for k, v in out.items()}


def pose_module(args):
    from sapiens2_ft.tasks.pose.module import PoseModule

    return PoseModule(size=args.size, input_size=tuple(args.input), keypoints=args.keypoints)


def sync(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def formula_flops(model, input_size) -> float:
    """Training FLOPs per image of the transformer: 6 N T + 12 L T^2 d (see the module docstring)."""
    from sapiens2_ft.models.sharding import transformer_blocks

    cfg = model.config
    patch = cfg.patch_size if isinstance(cfg.patch_size, int) else cfg.patch_size[0]
    tokens = (input_size[0] // patch) * (input_size[1] // patch) + 1 + cfg.num_register_tokens
    block_params = sum(p.numel() for b in transformer_blocks(model) for p in b.parameters())
    return 6 * block_params * tokens + 12 * cfg.num_hidden_layers * tokens**2 * cfg.hidden_size


def throughput(args) -> None:
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from sapiens2_ft.models.optim import OptimConfig, build_optimizer
    from sapiens2_ft.models.preprocessing import normalize_images

    device = torch.device(args.device)
    torch.manual_seed(0)
    t0 = time.perf_counter()
    module = pose_module(args)
    module.configure_model()  # no trainer: builds module.model on the CPU (random init from the preset)
    module.to(device)
    model = module.model.train()
    build_s = time.perf_counter() - t0
    optimizer = build_optimizer(model, OptimConfig(warmup_steps=0, fused=True), model.config.num_hidden_layers,
                                total_steps=args.warmup + args.steps + 1)["optimizer"]
    batch = make_batch(args.batch, args.input, len(module.metainfo.keypoint_names), device)
    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[args.dtype]

    def forward_backward():
        with torch.autocast(device.type, dtype=dtype, enabled=dtype != torch.float32):
            heatmaps = model(normalize_images(batch["image"])).heatmaps
        loss = module.loss_terms({"heatmaps": heatmaps.float()}, batch)["loss"]  # targets rendered on device
        loss.backward()
        return loss

    def step():
        forward_backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    with FlopCounterMode(display=False) as counter:  # on the eager model: compiled regions are not counted
        forward_backward()
    optimizer.zero_grad(set_to_none=True)
    counted = counter.get_total_flops()
    compile_s = 0.0
    if args.compile:
        from sapiens2_ft.models.sharding import compile_blocks

        compile_blocks(model)
        start = time.perf_counter()
        step()  # compilation
        sync(device)
        compile_s = time.perf_counter() - start

    for _ in range(args.warmup):
        step()
    sync(device)
    times = []
    for _ in range(args.steps):
        start = time.perf_counter()
        step()
        sync(device)
        times.append(time.perf_counter() - start)

    formula = formula_flops(model, args.input) * args.batch

    params = sum(p.numel() for p in model.parameters())
    step_s = statistics.median(times)
    peak = args.peak_tflops * 1e12
    h, w = args.input
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    mode = f"blocks compiled (first step {compile_s:.0f} s)" if args.compile else "eager"
    print(f"throughput: pose {args.size} ({params / 1e9:.3f}B params) at {h}x{w}, batch {args.batch}, {args.dtype}, "
          f"{name}, {mode}; built in {build_s:.0f} s; median of {args.steps} steps after {args.warmup} warm-up")
    print(f"train step: {1e3 * step_s:.1f} ms median (min {1e3 * min(times):.1f}, max {1e3 * max(times):.1f})")
    print(f"train images/s: {args.batch / step_s:.1f}")
    print(f"train FLOPs/step: counted {counted / 1e12:.4g} TFLOP, formula {formula / 1e12:.4g} TFLOP "
          f"(counted/formula {counted / formula:.2f})")
    print(f"achieved: {counted / step_s / 1e12:.4g} TFLOP/s (counted), {formula / step_s / 1e12:.4g} TFLOP/s (formula)")
    print(f"MFU vs {args.peak_tflops:g} TFLOP/s peak: {100 * counted / step_s / peak:.3g}% (counted FLOPs), "
          f"{100 * formula / step_s / peak:.3g}% (formula FLOPs)")
    if device.type == "cuda":
        print(f"peak GPU memory (throughput run, no checkpointing): "
              f"{torch.cuda.max_memory_allocated(device) / GIB:.1f} GiB allocated, "
              f"{torch.cuda.max_memory_reserved(device) / GIB:.1f} GiB reserved")


def fsdp_memory(args) -> None:
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    from sapiens2_ft.models.optim import OptimConfig, build_optimizer
    from sapiens2_ft.models.preprocessing import normalize_images
    from sapiens2_ft.models.sharding import ScaleConfig, place_model, transformer_blocks
    from sapiens2_ft.tasks.registry import model_class

    if "RANK" not in os.environ:  # started directly: a world of one
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    on_gpu = args.device == "cuda"
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device("cuda", local_rank) if on_gpu else torch.device("cpu")
    if on_gpu:
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if on_gpu else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    try:
        mesh = init_device_mesh(device.type, (world,))
        torch.manual_seed(0)
        scale = ScaleConfig(activation_checkpointing=args.checkpointing, param_dtype="bfloat16", reduce_dtype="float32")
        module = pose_module(args)
        t0 = time.perf_counter()
        model, _ = place_model(module.build, model_class("pose"), scale, mesh=mesh, device=device)
        module.model = model  # the module's loss only reads its hyperparameters: no other state to move
        build_s = time.perf_counter() - t0
        optimizer = build_optimizer(model, OptimConfig(warmup_steps=0, fused=True), model.config.num_hidden_layers,
                                    total_steps=args.steps + 1)["optimizer"]
        batch = make_batch(args.batch, args.input, len(module.metainfo.keypoint_names), device)
        wrapped = sum(hasattr(m, "_checkpoint_wrapped_module") for m in model.modules())
        blocks = len(transformer_blocks(model))
        if on_gpu:
            torch.cuda.synchronize(device)
            placed = torch.cuda.memory_allocated(device)
            torch.cuda.reset_peak_memory_stats(device)
        times = []
        for _ in range(args.steps):
            start = time.perf_counter()
            heatmaps = model(normalize_images(batch["image"])).heatmaps  # FSDP2 casts inputs to bf16
            loss = module.loss_terms({"heatmaps": heatmaps.float()}, batch)["loss"]
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            sync(device)
            times.append(time.perf_counter() - start)
        if on_gpu:
            mine = {"rank": rank, "placed": placed, "allocated": torch.cuda.max_memory_allocated(device),
                    "reserved": torch.cuda.max_memory_reserved(device), "step_s": statistics.median(times)}
        else:
            mine = {"rank": rank, "step_s": statistics.median(times)}
        everyone = [None] * world
        dist.all_gather_object(everyone, mine)
        if rank == 0:
            params = sum(p.numel() for p in model.parameters())
            h, w = args.input
            compute, adamw = ("bf16", "fused AdamW") if on_gpu else ("float32", "AdamW")
            print(f"fsdp-memory: pose {args.size} ({params / 1e9:.3f}B params) at {h}x{w}, "
                  f"per-rank batch {args.batch}, FSDP2 over {world} rank(s), {compute} compute, "
                  f"activation checkpointing every {args.checkpointing} "
                  f"({wrapped}/{blocks} blocks wrapped), {adamw}; placed in {build_s:.0f} s, {args.steps} steps")
            for r in everyone:
                if on_gpu:
                    print(f"rank {r['rank']}: peak GPU memory {r['allocated'] / GIB:.1f} GiB allocated, "
                          f"{r['reserved'] / GIB:.1f} GiB reserved (after placement {r['placed'] / GIB:.1f} GiB); "
                          f"step {1e3 * r['step_s']:.0f} ms")
                else:
                    print(f"rank {r['rank']}: (cpu smoke test, no GPU memory figures) step {1e3 * r['step_s']:.0f} ms")
    finally:
        dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("check", choices=["throughput", "fsdp-memory"])
    parser.add_argument("--size", default=None,
                        help="backbone preset (default 0.4b for throughput, 1b for fsdp-memory)")
    parser.add_argument("--input", type=int, nargs=2, default=[1024, 768], metavar=("H", "W"))
    parser.add_argument("--batch", type=int, default=None, help="per-rank batch (default 8 / 4)")
    parser.add_argument("--keypoints", default="coco17", help="keypoint set of the pose head")
    parser.add_argument("--steps", type=int, default=None, help="timed steps (default 10 / 3)")
    parser.add_argument("--warmup", type=int, default=3, help="throughput: untimed steps first")
    parser.add_argument("--dtype", choices=["bf16", "fp32"], default="bf16", help="throughput: autocast dtype")
    parser.add_argument("--checkpointing", type=int, default=1, help="fsdp-memory: checkpoint every n-th block")
    parser.add_argument("--peak_tflops", type=float, default=float(os.environ.get("PEAK_TFLOPS", 989)),
                        help="dense bf16 peak of the GPU (H100/H200 989, A100 312); env PEAK_TFLOPS")
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--compile", action="store_true", help="throughput: torch.compile each transformer block")
    args = parser.parse_args()
    throughput_check = args.check == "throughput"
    args.size = args.size or ("0.4b" if throughput_check else "1b")
    args.batch = args.batch or (8 if throughput_check else 4)
    args.steps = args.steps or (10 if throughput_check else 3)

    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit(f"gpu_check: torch {torch.__version__} sees no CUDA device")
    if args.device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    (throughput if throughput_check else fsdp_memory)(args)


if __name__ == "__main__":
    main()
