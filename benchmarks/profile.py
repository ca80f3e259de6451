"""
Rough breakdown of where a launch's time goes (used for the docs page, and to explain a missed target).

One probe job per launcher returns rank 0's wall-clock timestamps (see :func:`benchmarks.jobs.hvd_probe`); the
phases between the call, those timestamps and the returned value are reported in seconds.
"""

from __future__ import annotations

import time

from benchmarks import contenders, jobs

PHASES = [
    (
        "call -> rank process created",
        "Spark job + barrier task start (+ rendezvous server, allGather / task "
        "services / torchrun start, depending on the launcher)",
    ),
    (
        "rank process created -> function entry",
        "interpreter start, unpickling; ours also imports torch+horovod and runs hvd.init() here, before the function",
    ),
    ("imports inside the function", "torch / horovod.torch / torch.distributed imports still to do"),
    ("hvd.init() / init_process_group()", "rendezvous (0 when already done before the function)"),
    ("one allreduce", "the job's only collective"),
    ("function return -> value at the caller", "result write/transfer, rank exit, done reports to task 0, collect"),
]


def probe(launcher: str) -> dict[str, float]:
    """
    Run one probe job with ``launcher`` (``ours``, ``horovod.spark.run``, ``TorchDistributor``, or ``ours torch``:
    this provider's ``TorchDistributor``, B7); phase seconds.
    """
    t0 = time.time()
    if launcher == "ours":
        ts = contenders.run_ours(jobs.hvd_probe)
    elif launcher == "ours torch":
        ts = contenders.run_ours_torch(jobs.torch_dist_probe)
    elif launcher == "horovod.spark.run":
        ts = contenders.run_horovod_spark(jobs.hvd_probe)
    else:
        ts = contenders.run_torch_distributor(jobs.torch_dist_probe)
    t1 = time.time()
    values = [
        ts["created"] - t0,
        ts["entry"] - ts["created"],
        ts["imported"] - ts["entry"],
        ts["init"] - ts["imported"],
        ts["done"] - ts["init"],
        t1 - ts["done"],
    ]
    out = {name: value for (name, _), value in zip(PHASES, values, strict=True)}
    out["total"] = t1 - t0
    return out


EXIT_PROBE = (
    "import time, torch, horovod.torch as hvd; hvd.init(); hvd.allreduce(torch.ones(1)); print(time.time(), flush=True)"
)


def exit_seconds(statement: str = EXIT_PROBE) -> float:
    """Seconds from a fresh interpreter's last printed timestamp to its exit (interpreter + library teardown)."""
    import subprocess

    from benchmarks.env import PYTHON, bench_environ

    proc = subprocess.Popen(
        [PYTHON, "-c", statement], env=bench_environ(), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    last = float(proc.stdout.readline())
    proc.wait()
    return time.time() - last


def log_channel_seconds() -> float:
    """Open and close the runtime's driver log channel (``LogServer``) with no traffic."""
    from airflow_provider_horovod.runtime.wire.logs import LogServer

    start = time.perf_counter()
    with LogServer("127.0.0.1"):
        pass
    return time.perf_counter() - start


def reference_costs(spark) -> dict[str, float | str]:
    """
    Costs the launches are made of, measured alone: fresh imports (1 and 2 processes at once), task-side imports,
    rank exit, the driver log channel, an empty barrier job. A cost that cannot be measured gets its reason.
    """
    sc = spark.sparkContext
    fresh = contenders.fresh_import_seconds
    costs = {
        "fresh `import torch, horovod.torch` (1 process)": lambda: fresh("import torch, horovod.torch"),
        "fresh `import torch, horovod.torch` (2 processes at once, as 2 ranks do)": lambda: fresh(
            "import torch, horovod.torch", processes=2
        ),
        "fresh `import airflow_provider_horovod.runtime` (task side)": lambda: fresh(
            "import airflow_provider_horovod.runtime"
        ),
        "fresh `import horovod.runner.http.http_server` (rendezvous server, task 0)": lambda: fresh(
            "import horovod.runner.http.http_server"
        ),
        "fresh interpreter, no imports (`python -c pass`)": lambda: fresh("pass"),
        "rank-like process (torch, horovod, hvd.init, allreduce): last line -> exit": exit_seconds,
        "driver log channel (`LogServer`) open + close, no traffic": log_channel_seconds,
        "empty barrier job (2 tasks)": lambda: contenders.timed(
            lambda: sc.parallelize(range(2), 2).barrier().mapPartitions(lambda it: [1]).collect()
        )[0],
    }
    out: dict[str, float | str] = {}
    for name, fn in costs.items():
        try:
            out[name] = fn()
        except Exception as err:
            out[name] = f"not measured: {type(err).__name__}: {err}"
    return out
