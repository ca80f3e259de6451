"""Test DAG: the model goes to S3 (moto on 127.0.0.1) through an ObjectStoragePath with an ``aws`` connection."""

from __future__ import annotations

import os

import pendulum
from airflow.sdk import DAG, ObjectStoragePath

from airflow_provider_horovod.operators.horovod import HorovodRunnerOperator


def train_to_s3():
    import fsspec
    import horovod.torch as hvd
    import psutil
    import torch

    from airflow_provider_horovod.runtime import artifact_dir

    hvd.init()
    model = torch.nn.Linear(4, 2)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    if hvd.rank() != 0:
        return None
    path = f"{artifact_dir()}/model.pt"
    with fsspec.open(path, "wb") as f:
        torch.save(model.state_dict(), f)
    # what the test checks without ever putting the secret in XCom: this rank had it, and no process above it
    # (Python worker, Spark driver JVM, spark-submit) carries it on its command line
    secret = os.environ.get("AWS_SECRET_ACCESS_KEY", "")
    ancestors = psutil.Process().parents()
    return {
        "model_path": path,
        "has_secret": bool(secret),
        "ancestors": len(ancestors),
        "secret_on_a_command_line": any(secret and secret in " ".join(p.cmdline()) for p in ancestors),
    }


with DAG(
    "horovod_object_storage",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["test"],
):
    HorovodRunnerOperator(
        task_id="train",
        python_callable=train_to_s3,
        np=2,
        artifact_dir=ObjectStoragePath("s3://models/x/", conn_id="minio"),
        # the event log holds everything the Spark UI's Environment page shows (the History Server renders it)
        conf={
            "spark.eventLog.enabled": "true",
            "spark.eventLog.compress": "false",
            "spark.eventLog.dir": os.environ.get("HOROVOD_TEST_EVENT_LOG_DIR", "/tmp"),
        },
    )
