#!/usr/bin/env bash
# GPU checks of the training path (needs an NVIDIA GPU; random-init models, no download):
#
#  (i)  training images/s and model FLOPs utilisation of the 0.4b pose model at 1024x768, bf16 autocast,
#       fused AdamW, batch $BATCH (default 8; ~60 GB without checkpointing, use 4 on a 40 GB card).
#       MFU = training FLOPs per second / $PEAK_TFLOPS, FLOPs both counted (FlopCounterMode: matmuls,
#       convs, SDPA, forward + backward) and by formula (6 x block params x tokens + 12 x layers x
#       tokens^2 x hidden per image); see bench/gpu_check.py.
#  (ii) peak GPU memory of the 1b pose model at 1024x768 with FSDP2 (bf16 compute, float32 reduce)
#       and activation checkpointing on every block, per-rank batch $FSDP_BATCH (default 4), over
#       $NGPU GPUs (default 1: a world-size-1 FSDP2; NGPU=8 shards over 8 GPUs of this node).
#  (i-c) the same with torch.compile of every transformer block (model.scale.compile), compile time printed.
#  (iii) prediction people/s of the 0.4b pose model at 1024x768, bf16, batch 1 and batch 16.
#
# One line per figure; at most ~15 minutes (each check runs under `timeout`). Without a GPU it says so
# and exits 0. Environment:
#   PEAK_TFLOPS  dense bf16 peak per GPU (default: 989 for H100/H200, 312 for A100, else 989)
#   BATCH, FSDP_BATCH, NGPU, PYTHON (default: the repo's .venv/bin/python if present, else python)
#   GPU_CHECK_ARGS  extra arguments for both checks, last wins (e.g. "--steps 5"; a smoke test of the
#                   plumbing on a CPU box with a stub nvidia-smi: "--device cpu --size tiny --input 64 48")
#
# Run: bash bench/gpu_check.sh

set -u
cd "$(dirname "$0")/.."

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
    echo "gpu_check: no NVIDIA GPU here (nvidia-smi missing or failing); nothing to check"
    exit 0
fi

if [ -z "${PYTHON:-}" ]; then
    if [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python; else PYTHON=python; fi
fi
GPU_NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1)
if [ -z "${PEAK_TFLOPS:-}" ]; then
    case "$GPU_NAME" in
        *H100* | *H200* | *GH200*) PEAK_TFLOPS=989 ;;
        *A100*) PEAK_TFLOPS=312 ;;
        *) PEAK_TFLOPS=989; echo "gpu_check: unknown GPU '$GPU_NAME': assuming PEAK_TFLOPS=989 (set it to override)" ;;
    esac
fi
BATCH=${BATCH:-8}
FSDP_BATCH=${FSDP_BATCH:-4}
NGPU=${NGPU:-1}
read -r -a EXTRA <<< "${GPU_CHECK_ARGS:-}"
export PEAK_TFLOPS PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export WANDB_MODE=offline HF_HUB_OFFLINE=1 NO_ALBUMENTATIONS_UPDATE=1 TOKENIZERS_PARALLELISM=false

echo "gpu_check: $GPU_NAME x $(nvidia-smi -L | wc -l), peak $PEAK_TFLOPS TFLOP/s bf16 dense, python $PYTHON"
status=0

echo "== (i) throughput and MFU: pose 0.4b, 1024x768, bf16, batch $BATCH"
timeout --kill-after=15 180 "$PYTHON" bench/gpu_check.py throughput --size 0.4b --input 1024 768 \
    --batch "$BATCH" --warmup 3 --steps 10 --dtype bf16 --peak_tflops "$PEAK_TFLOPS" ${EXTRA[@]+"${EXTRA[@]}"} 2>&1 \
    | grep -v -e "^model from size preset" -e "Warning" ; rc=${PIPESTATUS[0]}
if [ "$rc" -ne 0 ]; then echo "gpu_check: throughput check failed (exit $rc; 124 = timed out)"; status=1; fi

echo "== (i-c) throughput and MFU with torch.compile of every block (model.scale.compile): same setup"
timeout --kill-after=15 300 "$PYTHON" bench/gpu_check.py throughput --size 0.4b --input 1024 768 \
    --batch "$BATCH" --warmup 3 --steps 10 --dtype bf16 --peak_tflops "$PEAK_TFLOPS" --compile ${EXTRA[@]+"${EXTRA[@]}"} 2>&1 \
    | grep -v -e "^model from size preset" -e "Warning" ; rc=${PIPESTATUS[0]}
if [ "$rc" -ne 0 ]; then echo "gpu_check: compiled throughput check failed (exit $rc; 124 = timed out)"; status=1; fi

echo "== (ii) peak memory: pose 1b, 1024x768, FSDP2 over $NGPU GPU(s) + activation checkpointing, batch $FSDP_BATCH per rank"
# torchrun would set OMP_NUM_THREADS=1: rank 0 initialises the full model on the CPU, give it the cores.
OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(( $(nproc) / NGPU > 0 ? $(nproc) / NGPU : 1 ))} \
timeout --kill-after=15 240 "$PYTHON" -m torch.distributed.run --standalone --nproc_per_node="$NGPU" \
    bench/gpu_check.py fsdp-memory --size 1b --input 1024 768 --batch "$FSDP_BATCH" --checkpointing 1 --steps 3 ${EXTRA[@]+"${EXTRA[@]}"} 2>&1 \
    | grep -v -e "^model from size preset" -e "Warning" -e "OMP_NUM_THREADS" -e "^\*\*\*\*" ; rc=${PIPESTATUS[0]}
if [ "$rc" -ne 0 ]; then echo "gpu_check: FSDP2 memory check failed (exit $rc; 124 = timed out)"; status=1; fi

echo "== (iii) prediction: pose 0.4b, 1024x768, bf16, people/s at batch 1 and batched (bench/predict_speed.py)"
timeout --kill-after=15 150 "$PYTHON" bench/predict_speed.py --device cuda --size 0.4b --input 1024 768 \
    --images 32 --batch 16 --precision bf16 --rounds 2 --data data/bench-predict 2>&1 \
    | grep -v -e "^model from size preset" -e "Warning" -e "synthetic dataset" ; rc=${PIPESTATUS[0]}
if [ "$rc" -ne 0 ]; then echo "gpu_check: prediction check failed (exit $rc; 124 = timed out)"; status=1; fi

exit $status
