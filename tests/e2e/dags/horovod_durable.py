"""Test DAGs: durable cluster-mode training (reattach after the task process dies), a deferred task killed by a user."""

from __future__ import annotations

import sys
from datetime import timedelta

import pendulum
from airflow.sdk import DAG, Asset

from airflow_provider_horovod.operators.horovod import HorovodRunnerOperator

CONF = {
    "spark.pyspark.python": sys.executable,
    "spark.pyspark.driver.python": sys.executable,
    "spark.driver.cores": "1",
    "spark.driver.memory": "512m",
    "spark.executor.memory": "512m",
    "spark.cores.max": "2",
}


def train_for(seconds: int | str, data_path: str):
    """Allreduce once a second for ``seconds`` (a rendered template too); rank 0 writes a model and returns metrics."""
    import os
    import time

    import horovod.torch as hvd
    import torch

    from airflow_provider_horovod.runtime import artifact_dir

    seconds = int(seconds)
    hvd.init()
    print("training started", flush=True)
    for _ in range(seconds):
        hvd.allreduce(torch.ones(1))
        time.sleep(1)
    if hvd.rank() != 0:
        return None
    path = os.path.join(artifact_dir(), "model.pt")
    torch.save({"steps": seconds}, path)
    return {"model_path": path, "steps": seconds, "data": data_path}


with DAG(
    dag_id="horovod_durable",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    default_args={"retries": 1, "retry_delay": timedelta(seconds=0)},
):
    HorovodRunnerOperator(
        task_id="train",
        python_callable=train_for,
        op_kwargs={"seconds": 40, "data_path": "/data/digits/features"},
        np=2,
        conn_id="spark_cluster",
        deploy_mode="cluster",
        deferrable=False,
        conf=CONF,
        poll_interval_s=1,
    )

with DAG(
    dag_id="horovod_deferred_kill",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    default_args={"retries": 0},
):
    HorovodRunnerOperator(
        task_id="train",
        python_callable=train_for,
        op_kwargs={"seconds": 600, "data_path": "/data/unused"},
        np=2,
        conn_id="spark_cluster",
        deploy_mode="cluster",
        deferrable=True,
        conf=CONF,
        poll_interval_s=1,
    )

with DAG(
    dag_id="horovod_deferred_asset",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    default_args={"retries": 0},
):
    HorovodRunnerOperator(
        task_id="train",
        python_callable=train_for,
        op_kwargs={"seconds": 3, "data_path": "/data/unused"},
        np=2,
        conn_id="spark_cluster",
        deploy_mode="cluster",
        deferrable=True,
        conf=CONF,
        poll_interval_s=1,
        outlets=[Asset("deferred_model")],
        # staged on S3 (moto): the triggerer reads the driver's status.json with the connection
        staging_dir="s3://minio@staging/{{ run_id }}/try-{{ ti.try_number }}",
    )

# Fault #22.4: a durable task that is cleared (or marked failed, then re-run) trains a fresh job.
for _dag_id, _deferrable in (
    ("horovod_deferred_clear", True),
    ("horovod_deferred_fail_rerun", True),
    ("horovod_sync_clear", False),
):
    with DAG(
        dag_id=_dag_id,
        schedule=None,
        start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
        catchup=False,
        default_args={"retries": 0},
    ):
        HorovodRunnerOperator(
            task_id="train",
            python_callable=train_for,
            op_kwargs={"seconds": "{{ 600 if ti.try_number == 1 else 5 }}", "data_path": "/data/x"},
            np=2,
            conn_id="spark_cluster",
            deploy_mode="cluster",
            deferrable=_deferrable,
            conf=CONF,
            poll_interval_s=1,
        )

# Fault #22.3: a driver (or its application) killed through the master, sync and deferred: the error says so.
for _dag_id, _deferrable in (("horovod_killed_sync", False), ("horovod_killed_deferred", True)):
    with DAG(
        dag_id=_dag_id,
        schedule=None,
        start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
        catchup=False,
        default_args={"retries": 0},
    ):
        HorovodRunnerOperator(
            task_id="train",
            python_callable=train_for,
            op_kwargs={"seconds": 600, "data_path": "/data/unused"},
            np=2,
            conn_id="spark_cluster",
            deploy_mode="cluster",
            deferrable=_deferrable,
            conf=CONF,
            poll_interval_s=1,
        )


def train_reporting(steps: int):
    """``steps`` allreduces a quarter second apart, each reported with report(): the task log's progress lines."""
    import time

    import horovod.torch as hvd
    import torch

    from airflow_provider_horovod.runtime import report

    hvd.init()
    for step in range(1, steps + 1):
        loss = hvd.allreduce(torch.tensor([1.0 / step])).item()
        report(step=step, total_steps=steps, loss=loss)
        time.sleep(0.25)
    return {"steps": steps} if hvd.rank() == 0 else None


with DAG(
    dag_id="horovod_progress",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    default_args={"retries": 0},
):
    # client mode on the embedded local Spark: the driver prints the line, the task log shows spark-submit's output
    HorovodRunnerOperator(
        task_id="client",
        python_callable=train_reporting,
        op_kwargs={"steps": 48},
        np=2,
        conf={"spark.pyspark.python": sys.executable},
    )
    # deferred cluster mode, staged on S3: the trigger reads the driver's progress.json there and logs the line
    HorovodRunnerOperator(
        task_id="deferred",
        python_callable=train_reporting,
        op_kwargs={"steps": 48},
        np=2,
        conn_id="spark_cluster",
        deploy_mode="cluster",
        deferrable=True,
        conf=CONF,
        poll_interval_s=1,
        outlets=[Asset("reported_model")],
        staging_dir="s3://minio@staging/progress/{{ run_id }}/try-{{ ti.try_number }}",
    )
