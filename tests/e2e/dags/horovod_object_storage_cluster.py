"""Test DAG: cluster deploy mode with staging and artifacts on S3 (moto on 127.0.0.1), no shared filesystem.

``[horovod] artifact_root`` is ``s3://minio@staged/root`` (set by the test): the default artifact directory and the
default staging directory are both on S3, with the ``minio`` connection's credentials.
"""

from __future__ import annotations

import os
import sys

import pendulum
from airflow.sdk import DAG

from airflow_provider_horovod.operators.horovod import HorovodRunnerOperator


def train_to_s3(tag):
    import os

    import fsspec
    import horovod.torch as hvd
    import psutil
    import torch

    from airflow_provider_horovod.runtime import artifact_dir

    hvd.init()
    total = hvd.allreduce(torch.tensor([float(hvd.rank() + 1)]), op=hvd.Sum)
    if hvd.rank() != 0:
        return None
    path = f"{artifact_dir()}/{tag}.pt"
    with fsspec.open(path, "wb") as f:
        torch.save({"total": total}, f)
    # the Spark driver runs elsewhere on the cluster (here: a process under a worker JVM); look at its command
    # lines (the driver program's Python and its DriverWrapper JVM) without putting any secret in XCom
    key_id, secret = os.environ.get("AWS_ACCESS_KEY_ID", ""), os.environ.get("AWS_SECRET_ACCESS_KEY", "")
    drivers = []
    for proc in psutil.process_iter(["cmdline"]):
        line = " ".join(proc.info["cmdline"] or [])
        if "horovod_driver.py" in line or "DriverWrapper" in line:
            drivers.append(line)
    return {
        "tag": tag,
        "size": hvd.size(),
        "total": total.item(),
        "model_path": path,
        "has_secret": bool(secret),
        "driver_processes": len(drivers),
        "driver_args_are_uris": any("--result-dir s3://" in d for d in drivers),
        "credentials_on_driver_command_line": any(key_id and (key_id in d or secret in d) for d in drivers),
    }


CONF = {
    "spark.pyspark.python": sys.executable,
    "spark.pyspark.driver.python": sys.executable,
    "spark.driver.cores": "1",
    "spark.driver.memory": "512m",
    "spark.executor.memory": "512m",
    # the event log holds everything the Spark UI's Environment page shows
    "spark.eventLog.enabled": "true",
    "spark.eventLog.compress": "false",
    "spark.eventLog.dir": os.environ.get("HOROVOD_TEST_EVENT_LOG_DIR", "/tmp"),
}

with DAG(
    dag_id="horovod_object_storage_cluster",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    default_args={"retries": 0},
):
    sync = HorovodRunnerOperator(
        task_id="sync",
        python_callable=train_to_s3,
        op_kwargs={"tag": "sync"},
        np=2,
        conn_id="spark_cluster",
        deferrable=False,
        conf=CONF,
        poll_interval_s=1,
    )
    deferred = HorovodRunnerOperator(
        task_id="deferred",
        python_callable=train_to_s3,
        op_kwargs={"tag": "deferred"},
        np=2,
        conn_id="spark_cluster",
        deferrable=True,
        conf=CONF,
        poll_interval_s=1,
    )
    sync >> deferred
