"""Test DAG: cluster deploy mode on a Spark standalone cluster, synchronous and deferred."""

from __future__ import annotations

import sys

import pendulum
from airflow.sdk import DAG

from airflow_provider_horovod.operators.horovod import HorovodRunnerOperator


def train_and_save(tag):
    import os

    import horovod.torch as hvd
    import torch

    from airflow_provider_horovod.runtime import artifact_dir

    hvd.init()
    total = hvd.allreduce(torch.tensor([float(hvd.rank() + 1)]), op=hvd.Sum)
    print(f"trained on rank {hvd.rank()}", flush=True)
    if hvd.rank() == 0:
        path = os.path.join(artifact_dir(), f"{tag}.pt")
        torch.save({"total": total}, path)
        return {"size": hvd.size(), "total": total.item(), "tag": tag}
    return None


CONF = {
    "spark.pyspark.python": sys.executable,
    "spark.pyspark.driver.python": sys.executable,
    "spark.driver.cores": "1",
    "spark.driver.memory": "512m",
    "spark.executor.memory": "512m",
}

with DAG(
    dag_id="horovod_cluster",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    default_args={"retries": 0},
):
    HorovodRunnerOperator(
        task_id="sync",
        python_callable=train_and_save,
        op_kwargs={"tag": "sync"},
        np=2,
        conn_id="spark_cluster",
        deploy_mode="cluster",
        deferrable=False,
        conf=CONF,
        poll_interval_s=1,
    )
    HorovodRunnerOperator(
        task_id="deferred",
        python_callable=train_and_save,
        op_kwargs={"tag": "deferred"},
        np=2,
        conn_id="spark_cluster",
        deferrable=True,
        conf=CONF,
        poll_interval_s=1,
    )


def long_training():
    import time

    import horovod.torch as hvd
    import torch

    hvd.init()
    for _ in range(600):
        hvd.allreduce(torch.ones(1))
        time.sleep(1)


with DAG(
    dag_id="horovod_cluster_long",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    default_args={"retries": 0},
):
    HorovodRunnerOperator(
        task_id="train",
        python_callable=long_training,
        np=2,
        conn_id="spark_cluster",
        deferrable=False,
        conf=CONF,
        poll_interval_s=1,
    )
