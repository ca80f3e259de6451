"""Test DAG: MLflow runs of a try whose rank fails, and of a task that succeeds on its second try."""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG

from airflow_provider_horovod.operators.horovod import HorovodRunnerOperator


def fail_on_rank_1():
    import horovod.torch as hvd

    from airflow_provider_horovod.runtime import report

    hvd.init()
    report(step=1, loss=1.0)
    if hvd.rank() == 1:
        raise RuntimeError("rank 1 ran out of data")
    hvd.allreduce(__import__("torch").ones(1), name="never")


def fail_first_try():
    import horovod.torch as hvd

    from airflow_provider_horovod.runtime import report, try_number

    hvd.init()
    report(step=1, loss=0.5)
    if try_number() == 1:
        raise RuntimeError("first try fails")
    return {"try": try_number()}


with DAG(
    dag_id="horovod_mlflow_failures",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_tasks=1,
):
    HorovodRunnerOperator(
        task_id="rank_fails",
        python_callable=fail_on_rank_1,
        np=2,
        retries=0,
        mlflow_conn_id="mlflow_default",
        mlflow_experiment="failures",
    )
    HorovodRunnerOperator(
        task_id="retried",
        python_callable=fail_first_try,
        np=2,
        retries=1,
        retry_delay=pendulum.duration(seconds=0),
        mlflow_conn_id="mlflow_default",
        mlflow_experiment="retries",
    )
