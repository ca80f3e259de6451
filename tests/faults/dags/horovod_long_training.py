"""Test DAG: a training run that lasts ten minutes unless it is stopped."""

import pendulum
from airflow.sdk import DAG

from airflow_provider_horovod.operators.horovod import HorovodRunnerOperator


def long_training():
    import time

    import horovod.torch as hvd
    import torch

    hvd.init()
    print("training started", flush=True)
    for _ in range(600):
        hvd.allreduce(torch.ones(1))
        time.sleep(1)


with DAG(
    dag_id="horovod_long_training", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"), catchup=False
):
    HorovodRunnerOperator(task_id="train", python_callable=long_training, np=2)


with DAG(
    dag_id="horovod_execution_timeout",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    default_args={"retries": 0},
):
    from datetime import timedelta

    HorovodRunnerOperator(task_id="train", python_callable=long_training, np=2, execution_timeout=timedelta(seconds=45))
