"""Test DAG: training that fails on its first try (after writing a model) and succeeds on the retry."""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.sdk import DAG

from airflow_provider_horovod.operators.horovod import HorovodRunnerOperator


def flaky_training():
    import os

    import horovod.torch as hvd
    import torch

    from airflow_provider_horovod.runtime import artifact_dir

    hvd.init()
    out = artifact_dir()
    try_dir = os.path.basename(out.rstrip("/"))
    if hvd.rank() == 0:
        with open(os.path.join(out, "model.pt"), "w") as f:
            f.write(f"weights from {try_dir}")
    hvd.allreduce(torch.ones(1))  # both ranks past the write
    if try_dir == "try-1":
        raise RuntimeError("transient failure on the first try")
    return try_dir


def rank_and_size():
    import horovod.torch as hvd

    hvd.init()
    return {"rank": hvd.rank(), "size": hvd.size()}


with DAG(
    dag_id="horovod_retry",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    default_args={"retries": 1, "retry_delay": timedelta(seconds=0)},
):
    HorovodRunnerOperator(task_id="train", python_callable=flaky_training, np=2)

with DAG(dag_id="horovod_parallel", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"), catchup=False):
    HorovodRunnerOperator(task_id="a", python_callable=rank_and_size, np=2)
    HorovodRunnerOperator(task_id="b", python_callable=rank_and_size, np=2)
