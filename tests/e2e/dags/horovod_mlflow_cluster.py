"""
Test DAGs: MLflow tracking in standalone cluster deploy mode (the driver, which logs report()'s metrics, runs on a
worker): sync and deferred, a durable task whose task process dies mid-training, a deferred task killed by a user.
The Spark event log is written to ``$HOROVOD_TEST_EVENT_LOG_DIR`` when set (the test greps it for the token).
"""

from __future__ import annotations

import os
import sys

import pendulum
from airflow.sdk import DAG

from airflow_provider_horovod.operators.horovod import HorovodRunnerOperator

EVENT_LOG_DIR = os.environ.get("HOROVOD_TEST_EVENT_LOG_DIR")
CONF = {
    "spark.pyspark.python": sys.executable,
    "spark.pyspark.driver.python": sys.executable,
    "spark.driver.cores": "1",
    "spark.driver.memory": "512m",
    "spark.executor.memory": "512m",
    "spark.cores.max": "2",
    # uncompressed, so that a grep for the token means something
    **(
        {"spark.eventLog.enabled": "true", "spark.eventLog.dir": EVENT_LOG_DIR, "spark.eventLog.compress": "false"}
        if EVENT_LOG_DIR
        else {}
    ),
}


def train_reporting(steps: int | str):
    """``steps`` allreduces about a second apart, each reported with ``report()`` (the loss is ``1/step``)."""
    import time

    import horovod.torch as hvd
    import torch

    from airflow_provider_horovod.runtime import report

    steps = int(steps)
    hvd.init()
    for step in range(1, steps + 1):
        loss = hvd.allreduce(torch.tensor([1.0 / step])).item()
        report(step=step, total_steps=steps, loss=loss)
        time.sleep(1)
    return {"steps": steps} if hvd.rank() == 0 else None


def _dag(dag_id: str, retries: int = 0) -> DAG:
    return DAG(
        dag_id=dag_id,
        schedule=None,
        start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
        catchup=False,
        default_args={"retries": retries, "retry_delay": pendulum.duration(seconds=0)},
    )


with _dag("mlflow_cluster"):
    for _task_id, _deferrable in (("sync", False), ("deferred", True)):
        HorovodRunnerOperator(
            task_id=_task_id,
            python_callable=train_reporting,
            op_kwargs={"steps": 10},
            np=2,
            conn_id="spark_cluster",
            deploy_mode="cluster",
            deferrable=_deferrable,
            conf=CONF,
            poll_interval_s=1,
            mlflow_conn_id="mlflow_default",
            mlflow_experiment=f"cluster_{_task_id}",
        )

with _dag("mlflow_cluster_durable", retries=1):
    HorovodRunnerOperator(
        task_id="train",
        python_callable=train_reporting,
        op_kwargs={"steps": 20},
        np=2,
        conn_id="spark_cluster",
        deploy_mode="cluster",
        deferrable=False,
        durable=True,
        conf=CONF,
        poll_interval_s=1,
        mlflow_conn_id="mlflow_default",
        mlflow_experiment="cluster_durable",
    )

with _dag("mlflow_cluster_killed"):
    HorovodRunnerOperator(
        task_id="train",
        python_callable=train_reporting,
        op_kwargs={"steps": 600},
        np=2,
        conn_id="spark_cluster",
        deploy_mode="cluster",
        deferrable=True,
        conf=CONF,
        poll_interval_s=1,
        mlflow_conn_id="mlflow_default",
        mlflow_experiment="cluster_killed",
    )
