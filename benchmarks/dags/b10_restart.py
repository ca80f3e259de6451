"""
B10 through Airflow (:mod:`benchmarks.airflow_restart`): B10's training as two DAGs of one task each, run by a real
deployment on the benchmark's standalone cluster (the ``spark_cluster`` connection, client deploy mode, one executor
of one core per rank and no spare: ``spark.cores.max=2``). ``b10_airflow_retry`` fails its try when an executor is lost
and Airflow retries it (``retries=1``, ``retry_delay=0``); ``b10_in_job`` restarts the barrier job within its one try
(``max_restarts=1``, ``retries=0``). The training and its numbers are B9's and B10's
(:data:`benchmarks.lost_executor.HARNESS`); rank 0 appends each step it trains, with its try, attempt and time, to
``steps.jsonl`` beside the task's checkpoint directory.
"""

from __future__ import annotations

import sys
from datetime import timedelta

import pendulum
from airflow.sdk import DAG

from airflow_provider_horovod.operators.horovod import HorovodRunnerOperator
from benchmarks.lost_executor import INTERVAL, STEP_S, STEPS

CONF = {
    "spark.pyspark.python": sys.executable,
    "spark.pyspark.driver.python": sys.executable,
    "spark.driver.memory": "512m",
    "spark.executor.memory": "512m",
    "spark.executor.cores": "1",
    "spark.cores.max": "2",
}


def train(steps: int, interval: int, step_s: float):
    """
    B9's training (``benchmarks/lost_executor.py``'s script), recording each step beside the checkpoints.

    :param steps: steps to train (one allreduce and ``step_s`` of work each).
    :param interval: a checkpoint every ``interval`` steps.
    :param step_s: seconds of work per step.
    """
    import json
    import os
    import time

    import horovod.torch as hvd
    import torch

    from airflow_provider_horovod.runtime import (
        checkpoint_dir,
        load_checkpoint,
        restart_count,
        save_checkpoint,
        try_number,
    )

    hvd.init()
    resumed = load_checkpoint()
    start = resumed[1] if resumed else 0
    weight = resumed[0]["weight"] if resumed else torch.zeros(1)
    record = os.path.join(os.path.dirname(checkpoint_dir().rstrip("/")), "steps.jsonl")
    for step in range(start + 1, steps + 1):
        weight += hvd.allreduce(torch.ones(1))
        time.sleep(step_s)
        if hvd.rank() == 0:
            with open(record, "a") as f:
                record_ = {"try": try_number(), "attempt": restart_count(), "step": step, "t": time.time()}
                f.write(json.dumps(record_) + "\n")
            if step % interval == 0:
                save_checkpoint({"weight": weight}, step=step)
    return {"try": try_number(), "resumed_from": start, "weight": float(weight)} if hvd.rank() == 0 else None


for _dag_id, _retries, _max_restarts in (("b10_airflow_retry", 1, 0), ("b10_in_job", 0, 1)):
    with DAG(
        dag_id=_dag_id,
        schedule=None,
        start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
        catchup=False,
        default_args={"retries": _retries, "retry_delay": timedelta(seconds=0)},
    ):
        HorovodRunnerOperator(
            task_id="train",
            python_callable=train,
            op_kwargs={"steps": STEPS, "interval": INTERVAL, "step_s": STEP_S},
            np=2,
            conn_id="spark_cluster",
            deploy_mode="client",
            deferrable=False,
            conf=CONF,
            poll_interval_s=1,
            max_restarts=_max_restarts,
        )
