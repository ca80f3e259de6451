#!/usr/bin/env bash
# One command on a GPU machine: train the example model with Horovod on every GPU and report samples/s.
# Falls back to the CPU (and says so) without CUDA or with a CPU-only Horovod. Bounded to 10 minutes.
# Extra arguments go to benchmarks/gpu_check.py (--np, --epochs, --batch-size, --cpu, --launcher ddp, --out FILE);
# --launcher ddp measures PyTorch DDP (TorchDistributor, NCCL on GPUs) instead of Horovod.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
[ -x "$PY" ] || { echo "gpu_check: $PY not found; run scripts/setup.sh first or set PYTHON" >&2; exit 2; }
export SPARK_LOCAL_IP=${SPARK_LOCAL_IP:-127.0.0.1}
exec timeout --kill-after=10 600 "$PY" -m benchmarks.gpu_check "$@"
