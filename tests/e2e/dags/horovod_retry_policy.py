"""
Test DAG (issue #36): Airflow 3.3's retry_policy with the provider's training_retry_policy(): the training code's own
exception fails at once although retries remain; a rank killed by a signal (an infrastructure failure) is retried.
"""

from __future__ import annotations

import sys
from datetime import timedelta

import pendulum
from airflow.sdk import DAG

from airflow_provider_horovod.operators.horovod import HorovodRunnerOperator
from airflow_provider_horovod.retry_policy import training_retry_policy


def code_bug():
    import horovod.torch as hvd

    hvd.init()
    if hvd.rank() == 1:
        raise ValueError("corrupt shard on rank 1")
    return "unreachable"


def killed_on_the_first_try():
    import os
    import signal

    import horovod.torch as hvd

    from airflow_provider_horovod.runtime import try_number

    hvd.init()
    if try_number() == 1 and hvd.rank() == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    return try_number()


with DAG(
    dag_id="horovod_retry_policy",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_tasks=1,
    default_args={"retries": 2, "retry_delay": timedelta(seconds=0), "retry_policy": training_retry_policy()},
):
    HorovodRunnerOperator(
        task_id="code_bug", python_callable=code_bug, np=-2, conf={"spark.pyspark.python": sys.executable}
    )
    HorovodRunnerOperator(
        task_id="killed_rank",
        python_callable=killed_on_the_first_try,
        np=-2,
        conf={"spark.pyspark.python": sys.executable},
    )
