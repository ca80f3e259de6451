"""
The barrier stage over **Spark Connect**: no JVM on the caller's side.

``spark.range(np, numPartitions=np).mapInArrow(task, "chunk binary", barrier=True)`` runs the same
:func:`~airflow_provider_horovod.runtime.task.launch.barrier_task` as the classic path; rank 0's cloudpickled return
value comes back as binary rows (split to stay under Connect's Arrow batch limit). Cancellation uses a job tag
(``interruptTag``); the runtime reaches the executors through ``addArtifacts(..., pyfile=True)``.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import socket
import tempfile
import uuid
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from airflow_provider_horovod.runtime.driver.outcome import raise_for_stage_failure
from airflow_provider_horovod.runtime.driver.shipping import RUNTIME_ZIP_NAME
from airflow_provider_horovod.runtime.errors import LaunchError
from airflow_provider_horovod.runtime.settings import check_barrier_conf
from airflow_provider_horovod.runtime.task.launch import barrier_task
from airflow_provider_horovod.runtime.wire.jobspec import JobSpec
from airflow_provider_horovod.runtime.wire.logs import LogServer

CHUNK_BYTES = 1 << 20
"""Rank 0's result travels in rows of at most this many bytes (Connect caps Arrow batches at a few MiB)."""


def is_connect_session(spark: Any) -> bool:
    """True for a Spark Connect ``SparkSession`` (``pyspark.sql.connect``)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def _arrow_task(spec: JobSpec, batches: Iterable[Any]) -> Iterator[Any]:
    import pyarrow as pa

    for result in barrier_task(spec, batches):
        for start in range(0, max(len(result), 1), CHUNK_BYTES):
            yield pa.RecordBatch.from_pydict(
                {"chunk": [result[start : start + CHUNK_BYTES]]}, schema=pa.schema([("chunk", pa.binary())])
            )


def callback_host(spark: Any) -> str:
    """
    This machine's address as the cluster sees it: the source address of the route to the Connect server.

    ``HOROVOD_AIRFLOW_CALLBACK_HOST`` overrides it (NAT, several interfaces).
    """
    override = os.environ.get("HOROVOD_AIRFLOW_CALLBACK_HOST")
    if override:
        return override
    host = getattr(getattr(spark.client, "_builder", None), "host", None)  # the Connect server's host
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((socket.gethostbyname(host or "127.0.0.1"), 9))
        return probe.getsockname()[0]


def run_barrier_connect(
    spark: Any, spec: JobSpec, runtime_zip: bytes, metrics: Callable[[dict], None] | None = None
) -> bytes | None:
    """
    Run the barrier stage through a Spark Connect session; return rank 0's cloudpickled value.

    :param spark: the Spark Connect session.
    :param spec: the job.
    :param runtime_zip: the runtime, added to the session as a Python artifact.
    :param metrics: called with the ranks' ``report()`` records.

    :raises RankFailedError: a rank failed (root cause).
    :raises LaunchError: the stage could not run.
    """
    try:
        check_barrier_conf(
            {"spark.dynamicAllocation.enabled": spark.conf.get("spark.dynamicAllocation.enabled", "false")},
            source="the Spark Connect session's conf",
        )
    except ValueError as err:
        raise LaunchError(str(err)) from None
    with tempfile.TemporaryDirectory(prefix="horovod-connect-") as tmp:
        path = os.path.join(tmp, RUNTIME_ZIP_NAME)
        with open(path, "wb") as f:
            f.write(runtime_zip)
        try:
            spark.addArtifacts(path, pyfile=True)
        except Exception as err:  # noqa: BLE001 - the same artifact added twice in one session is refused
            if "already exists" not in str(err).lower():
                raise
    tag = f"horovod-{uuid.uuid4().hex[:12]}"
    stage_error: Exception | None = None
    chunks: list[bytes] = []
    with LogServer(callback_host(spark), on_metrics=metrics) as logs:
        spec = dataclasses.replace(spec, log_address=logs.address, log_token=logs.token)
        spark.addTag(tag)
        try:
            frame = spark.range(0, spec.np, 1, spec.np).mapInArrow(
                functools.partial(_arrow_task, spec), "chunk binary", barrier=True
            )
            chunks = [row["chunk"] for row in frame.collect()]
        except KeyboardInterrupt:
            spark.interruptTag(tag)
            raise
        except Exception as err:
            stage_error = err
        finally:
            spark.removeTag(tag)
    if stage_error is not None:
        raise_for_stage_failure(
            stage_error,
            logs.failures,
            lambda: (
                f"np={spec.np} needs {spec.np} task slots at the same time (one barrier task per rank), more than the "
                "cluster behind this Spark Connect server has; add executors or cores, or lower np"
            ),
        )
    return b"".join(bytes(c) for c in chunks) if chunks else None
