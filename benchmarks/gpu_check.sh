#!/usr/bin/env bash
# The GPU check, ready to run on a machine with one or more CUDA GPUs (under 8 minutes on one H100):
#   1. the CUDA-marked tests (bf16 and fp16 training, MFU against the GPU's dense peak, FSDP over
#      NCCL with a sharded checkpoint resumed by one process, generation on the GPU);
#   2. BERT-base MLM and GPT-2-small CLM, 200 bf16 steps each, ptmkit and HF transformers on the
#      same batches: tokens/s and MFU (benchmarks/bench_gpu.py);
#   3. the same two models under FSDP on one GPU (torchrun, a group of one);
#   4. step 2 again under torch.compile.
# Without a GPU, `benchmarks/gpu_check.sh --dry-run` runs every step that can run on a CPU: the
# tests are collected and skipped, the benchmark runs at tiny sizes (torch.compile included), and
# FSDP runs over two CPU processes with gloo.
#
#   benchmarks/gpu_check.sh [--dry-run]        (from the repository root, in the project's venv)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
TORCHRUN=${TORCHRUN:-$(dirname "$(command -v "$PY")")/torchrun}
STEPS=${STEPS:-200}
if [[ "${1:-}" == "--dry-run" ]]; then
    echo "== dry run on the CPU: $("$PY" -c 'from ptmkit.train.mfu import device_name; print(device_name("cpu"))')"
    "$PY" -m pytest -q -m cuda tests/gpu -p no:cacheprovider
    OMP_NUM_THREADS=1 "$PY" benchmarks/bench_gpu.py --dry-run
    OMP_NUM_THREADS=1 "$TORCHRUN" --nproc_per_node 2 --standalone benchmarks/bench_gpu.py --dry-run --fsdp
    exit 0
fi
if ! "$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)'; then
    echo "PyTorch sees no CUDA GPU here (torch $("$PY" -c 'import torch; print(torch.__version__)')); install a CUDA build" \
         "of torch, or run benchmarks/gpu_check.sh --dry-run" >&2
    exit 2
fi
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
# each step runs even when one before it fails; the exit status says whether all passed.
# Cheapest first: the compiled rows (minutes of compiling) come last.
failed=0
"$PY" -m pytest -q -m cuda tests/gpu -p no:cacheprovider || failed=1
"$PY" benchmarks/bench_gpu.py --steps "$STEPS" --no-compile || failed=1
"$TORCHRUN" --nproc_per_node 1 --standalone benchmarks/bench_gpu.py --steps "$STEPS" --fsdp || failed=1
"$PY" benchmarks/bench_gpu.py --steps "$STEPS" --compiled-only || failed=1
exit $failed
