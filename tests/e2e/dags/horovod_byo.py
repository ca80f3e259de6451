"""
Test DAG for "bring your own Airflow and Spark" (tests/e2e/test_bring_your_own.py): the same training in client
deploy mode, cluster deploy mode and deferred cluster mode, with executors (and drivers) on the interpreter named
by ``BYO_EXECUTOR_PYTHON``, which has torch, cloudpickle and Horovod but not this package, and event logs in
``BYO_EVENT_LOG_DIR`` for a Spark History Server.
"""

from __future__ import annotations

import os

import pendulum
from airflow.sdk import DAG

from airflow_provider_horovod.operators.horovod import HorovodRunnerOperator


def train(tag):
    import os
    import sys
    import time

    import horovod.torch as hvd
    import torch

    import airflow_provider_horovod
    from airflow_provider_horovod.runtime import artifact_dir

    hvd.init()
    total = hvd.allreduce(torch.tensor([float(hvd.rank() + 1)]), op=hvd.Sum)
    for _ in range(
        6
    ):  # train for a few seconds: the 1 s progress poll then sees both ranks running, even on a busy host
        hvd.allreduce(torch.ones(1))
        time.sleep(1)
    if hvd.rank() == 0:
        torch.save({"total": total}, os.path.join(artifact_dir(), f"{tag}.pt"))
        return {
            "size": hvd.size(),
            "total": total.item(),
            "python": sys.executable,
            "runtime": airflow_provider_horovod.__file__,
        }
    return None


CONF = {
    "spark.pyspark.python": os.environ.get("BYO_EXECUTOR_PYTHON", "python3"),  # the driver's too, both modes
    "spark.eventLog.enabled": "true",
    "spark.eventLog.dir": f"file://{os.environ.get('BYO_EVENT_LOG_DIR', '/tmp/spark-events')}",
    "spark.driver.cores": "1",
    "spark.driver.memory": "512m",
    "spark.executor.memory": "512m",
}

with DAG(
    dag_id="horovod_byo",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    default_args={"retries": 0},
):
    client = HorovodRunnerOperator(
        task_id="client",
        python_callable=train,
        op_kwargs={"tag": "client"},
        np=2,
        conn_id="spark_byo",
        deploy_mode="client",
        conf=CONF,
        poll_interval_s=1,
    )
    cluster = HorovodRunnerOperator(
        task_id="cluster",
        python_callable=train,
        op_kwargs={"tag": "cluster"},
        np=2,
        conn_id="spark_byo",
        deploy_mode="cluster",
        deferrable=False,
        conf=CONF,
        poll_interval_s=1,
    )
    deferred = HorovodRunnerOperator(
        task_id="deferred",
        python_callable=train,
        op_kwargs={"tag": "deferred"},
        np=2,
        conn_id="spark_byo",
        deploy_mode="cluster",
        deferrable=True,
        conf=CONF,
        poll_interval_s=1,
    )
    client >> cluster >> deferred
