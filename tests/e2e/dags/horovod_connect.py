"""Test DAG: the barrier job from the Airflow worker through a Spark Connect session."""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG

from airflow_provider_horovod.operators.horovod import HorovodRunnerOperator


def train_and_save():
    import os

    import horovod.torch as hvd
    import torch

    from airflow_provider_horovod.runtime import artifact_dir

    hvd.init()
    total = hvd.allreduce(torch.tensor([float(hvd.rank() + 1)]), op=hvd.Sum)
    print(f"connect training on rank {hvd.rank()}", flush=True)
    if hvd.rank() == 0:
        path = os.path.join(artifact_dir(), "model.pt")
        torch.save({"total": total}, path)
        return {"size": hvd.size(), "total": total.item()}
    return None


with DAG(
    dag_id="horovod_connect",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    default_args={"retries": 0},
):
    HorovodRunnerOperator(task_id="train", python_callable=train_and_save, np=2, conn_id="spark_connect_test")
