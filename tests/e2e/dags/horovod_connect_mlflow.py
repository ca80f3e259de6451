"""Test DAG: MLflow tracking over Spark Connect (the metrics collector runs in the Airflow task): a training that
reports its loss, and a failing rank."""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG

from airflow_provider_horovod.operators.horovod import HorovodRunnerOperator


def train_reporting(steps: int, lr: float):
    """``steps`` allreduces, each reported with ``report()``; rank 0 returns the last loss."""
    import horovod.torch as hvd
    import torch

    from airflow_provider_horovod.runtime import report

    hvd.init()
    loss = None
    for step in range(1, int(steps) + 1):
        loss = hvd.allreduce(torch.tensor([float(lr) / step])).item()
        report(step=step, total_steps=int(steps), loss=loss)
    return {"size": hvd.size(), "loss": loss} if hvd.rank() == 0 else None


def fail_on_rank_one():
    import horovod.torch as hvd
    import torch

    hvd.init()
    if hvd.rank() == 1:
        raise ValueError("bad shard over Connect")
    hvd.allreduce(torch.ones(1))


with DAG(
    dag_id="horovod_connect_mlflow",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    default_args={"retries": 0},
):
    HorovodRunnerOperator(
        task_id="train",
        python_callable=train_reporting,
        op_kwargs={"steps": 4, "lr": 0.5},
        np=2,
        conn_id="spark_connect_test",
        mlflow_conn_id="mlflow_test",
        mlflow_experiment="connect_training",
    )
    HorovodRunnerOperator(
        task_id="rank_fails",
        python_callable=fail_on_rank_one,
        np=2,
        conn_id="spark_connect_test",
        mlflow_conn_id="mlflow_test",
        mlflow_experiment="connect_failures",
    )
