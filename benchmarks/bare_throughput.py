"""
The training job of B3/B8 as a plain program, for the bare launchers:
``torchrun --standalone --nproc_per_node=2 -m benchmarks.bare_throughput --job ddp ...``
(:func:`benchmarks.jobs.ddp_train_throughput`) and
``horovodrun -np 2 --gloo python -m benchmarks.bare_throughput --job hvd ...``
(:func:`benchmarks.jobs.hvd_train_throughput`). Rank 0 writes the job's result as JSON to ``--out``.

Same function, same arguments, same example model as the in-Spark contenders: only the launcher differs. Needs the
repository on ``PYTHONPATH`` (:func:`benchmarks.env.bench_environ`).
"""

from __future__ import annotations

import argparse
import json
import os


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--job", choices=("ddp", "hvd"), required=True)
    parser.add_argument("--data-path", required=True)
    parser.add_argument("--batch-size", type=int, required=True)
    parser.add_argument("--warmup-steps", type=int, required=True)
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    from benchmarks import jobs
    from benchmarks.example_model import build_model

    fn = jobs.ddp_train_throughput if args.job == "ddp" else jobs.hvd_train_throughput
    result = fn(args.data_path, build_model, args.batch_size, args.warmup_steps, args.steps)
    rank = int(os.environ.get("RANK", os.environ.get("HOROVOD_RANK", "0")))
    if rank == 0:
        with open(args.out, "w") as f:
            json.dump(result, f)


if __name__ == "__main__":
    main()
