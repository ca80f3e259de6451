"""
Helpers for the shared-cluster tests: a tiny Horovod training function that records every start, and the hook
calls that submit it the way the operator does (client mode through ``HorovodHook``, cluster mode through
``HorovodStandaloneHook``).
"""

from __future__ import annotations

import os
import secrets
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

RECORD = "starts.log"
"""Every rank of every job appends ``<tag> <rank> <pid>`` here when it starts: a job run twice shows up twice."""


def train(tag: str, record: str, gate: str | None = None, gate_timeout_s: float = 300.0) -> dict | None:
    """
    The training function: ``hvd.init()``, record the start, optionally wait for ``gate`` to exist, one
    allreduce; rank 0 writes ``<tag>.txt`` under its artifact directory and returns wall-clock times.

    :param tag: the job's name.
    :param record: the file every rank appends its start to.
    :param gate: a file the ranks wait for (the test creates it once it has seen what it waits for).
    :param gate_timeout_s: the most seconds to wait for ``gate``.
    """
    import os
    import time

    import horovod.torch as hvd
    import torch

    from airflow_provider_horovod.runtime import artifact_dir

    entered = time.time()
    hvd.init()
    with open(record, "a") as f:  # O_APPEND: lines of concurrent ranks do not interleave
        f.write(f"{tag} {hvd.rank()} {os.getpid()}\n")
    if gate:
        deadline = time.monotonic() + gate_timeout_s
        while not os.path.exists(gate) and time.monotonic() < deadline:
            time.sleep(0.2)  # a file gate the test opens; bounded
    total = hvd.allreduce(torch.tensor([1.0]), op=hvd.Sum).item()
    if hvd.rank() != 0:
        return None
    with open(os.path.join(artifact_dir(), f"{tag}.txt"), "w") as f:
        f.write(tag)
    import importlib.util

    # where this rank, and the Spark Python worker whose import path it inherits, finds PySpark
    pyspark_origin = importlib.util.find_spec("pyspark").origin
    return {
        "tag": tag,
        "size": hvd.size(),
        "total": total,
        "entered": entered,
        "done": time.time(),
        "pyspark": pyspark_origin,
    }


def train_ddp(tag: str, record: str, gate: str | None = None, gate_timeout_s: float = 300.0) -> dict | None:
    """:func:`train` with ``torch.distributed`` (``launcher="torch"``): ``init_process_group("gloo")`` from the
    torchrun environment, the start recorded, one all_reduce; rank 0 returns the world size and wall-clock times.
    ``gate`` and ``gate_timeout_s`` are accepted for :func:`payload_file`'s sake and unused."""
    import os
    import time

    import torch
    import torch.distributed as dist

    entered = time.time()
    dist.init_process_group("gloo")
    try:
        with open(record, "a") as f:
            f.write(f"{tag} {dist.get_rank()} {os.getpid()}\n")
        total = torch.ones(1)
        dist.all_reduce(total)
        return (
            {"tag": tag, "size": dist.get_world_size(), "total": total.item(), "entered": entered, "done": time.time()}
            if dist.get_rank() == 0
            else None
        )
    finally:
        dist.destroy_process_group()


def starts(work: Path) -> list[tuple[str, int]]:
    """``(tag, rank)`` of every rank start recorded so far."""
    path = work / RECORD
    if not path.exists():
        return []
    return [(line.split()[0], int(line.split()[1])) for line in path.read_text().splitlines() if line.strip()]


def job_conf(np: int, executor_cores: int = 2) -> dict[str, str]:
    """
    An application of ``np`` task slots on executors of ``executor_cores`` cores, capped at ``np`` cores
    (``spark.cores.max``) so that smaller jobs can run beside it. Two-core executors (a whole test worker) mean
    half the executor JVMs to start; cluster deploy mode needs one-core executors, since drivers take single
    cores on the workers.
    """
    return {
        "spark.pyspark.python": sys.executable,
        "spark.pyspark.driver.python": sys.executable,
        "spark.executor.cores": str(executor_cores),
        "spark.cores.max": str(np),
        "spark.executor.memory": "512m",
        "spark.driver.memory": "512m",
        "spark.ui.enabled": "false",
    }


def payload_file(
    staging: Path, tag: str, work: Path, gate: Path | None, fn: Callable[..., Any] = train
) -> tuple[Path, bytes]:
    """Write the signed payload of ``fn`` (:func:`train`) for one job into ``staging`` (0600); return its path and
    key."""
    from airflow_provider_horovod.runtime.wire.payload import dumps_payload

    key = secrets.token_bytes(32)
    payload = dumps_payload(
        fn, (), {"tag": tag, "record": str(work / RECORD), "gate": str(gate) if gate else None}, key=key
    )
    staging.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = staging / "payload.bin"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(payload)
    return path, key


def run_client_job(
    conn_id: str,
    np: int,
    tag: str,
    work: Path,
    *,
    lines: list[str],
    gate: Path | None = None,
    marker: dict[str, str] | None = None,
    slot_wait_timeout_s: float | None = 600.0,
    conf: dict[str, str] | None = None,
    launcher: str = "horovod",
) -> Any:
    """
    One job in client deploy mode through ``HorovodHook`` (spark-submit from this process), as the operator runs
    it; every line spark-submit prints goes to ``lines``. ``launcher="torch"`` runs :func:`train_ddp` instead of
    :func:`train`.

    :return: the hook's ``JobResult`` with ``value`` (rank 0's unpickled return value) added.
    """
    import cloudpickle

    from airflow_provider_horovod.hooks.horovod import HorovodHook
    from airflow_provider_horovod.job import TrainingJob
    from airflow_provider_horovod.runtime.settings import JobSettings

    staging = work / "staging" / tag
    path, key = payload_file(staging, tag, work, gate, train_ddp if launcher == "torch" else train)
    job = TrainingJob(
        key=key,
        payload=b"",
        artifact_dir=str(work / "artifacts" / tag),
        settings=JobSettings(np=np, slot_wait_timeout_s=slot_wait_timeout_s, launcher=launcher),
        env=marker or {},
        conf={**job_conf(np), **(conf or {})},
        app_name=f"shared-{tag}",
    )
    result = HorovodHook(conn_id=conn_id).run_job(
        job, payload_path=str(path), staging_dir=str(staging), on_output=lines.append
    )
    result.value = cloudpickle.loads(result.return_value) if result.return_value else None
    return result


def wait_until(
    condition: Callable[[], Any], what: str, *, timeout_s: float = 240.0, context: Callable[[], str] = lambda: ""
) -> Any:
    """Poll ``condition`` (external processes) every 0.2 s until it is true; fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}\n{context()}")
        time.sleep(0.2)
