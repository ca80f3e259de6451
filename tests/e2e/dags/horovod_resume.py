"""
Test DAGs (issue #26): an example-shaped training that checkpoints every few steps and resumes, with ``retries=1``;
the tests kill the executor (cluster deploy mode) or the whole worker (client deploy mode) that runs one rank. And
(issue #36) the same training with ``max_restarts=1`` and no retries: the lost executor restarts the job in the try.
"""

from __future__ import annotations

import sys
from datetime import timedelta

import pendulum
from airflow.sdk import DAG, Asset

from airflow_provider_horovod.operators.horovod import HorovodRunnerOperator

CONF = {
    "spark.pyspark.python": sys.executable,
    "spark.pyspark.driver.python": sys.executable,
    "spark.driver.cores": "1",
    "spark.driver.memory": "512m",
    "spark.executor.memory": "512m",
    # one executor per rank; Spark's defaults for re-attempts stay (spark.stage.maxConsecutiveAttempts=4,
    # spark.task.maxFailures=4): the tests show it re-attempts nothing
    "spark.executor.cores": "1",
    "spark.cores.max": "2",
}
STEPS, INTERVAL = 40, 5


def train_resumable(steps: int, interval: int, step_s: float):
    """
    ``steps`` steps of one allreduce and ``step_s`` s of work, a checkpoint every ``interval`` steps; rank 0 appends
    each step it trains (with its try and time) to ``steps.jsonl`` next to the checkpoint directory.
    """
    import json
    import os
    import time

    import horovod.torch as hvd
    import torch

    from airflow_provider_horovod.runtime import (
        checkpoint_dir,
        load_checkpoint,
        report,
        restart_count,
        save_checkpoint,
        try_number,
    )

    hvd.init()
    resumed = load_checkpoint()  # rank 0 logs "resuming from checkpoint step N (try T)"
    start, weight = (resumed[1], resumed[0]["weight"]) if resumed else (0, torch.zeros(1))
    record = os.path.join(os.path.dirname(checkpoint_dir().rstrip("/")), "steps.jsonl")
    for step in range(start + 1, steps + 1):
        weight += hvd.allreduce(torch.ones(1), op=hvd.Sum)
        time.sleep(step_s)
        report(step=step, total_steps=steps)
        if hvd.rank() == 0:
            with open(record, "a") as f:
                record_ = {"try": try_number(), "restart": restart_count(), "step": step, "t": time.time()}
                f.write(json.dumps(record_) + "\n")
            if step % interval == 0:
                save_checkpoint({"weight": weight}, step=step)
    if hvd.rank() != 0:
        return None
    return {
        "try_number": try_number(),
        "restart_count": restart_count(),
        "resumed_from_step": start,
        "trained_steps": [start + 1, steps],
        "weight": float(weight),
    }


for _dag_id, _mode in (("horovod_resume_executor", "cluster"), ("horovod_resume_worker", "client")):
    with DAG(
        dag_id=_dag_id,
        schedule=None,
        start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
        catchup=False,
        default_args={"retries": 1, "retry_delay": timedelta(seconds=0)},
    ):
        HorovodRunnerOperator(
            task_id="train",
            python_callable=train_resumable,
            op_kwargs={"steps": STEPS, "interval": INTERVAL, "step_s": 0.25},
            np=2,
            conn_id="spark_cluster",
            deploy_mode=_mode,
            deferrable=False,
            conf=CONF,
            poll_interval_s=1,
            outlets=[Asset(f"{_dag_id}_model")],
        )


with DAG(
    dag_id="horovod_restart_in_job",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    default_args={"retries": 0},
):
    HorovodRunnerOperator(
        task_id="train",
        python_callable=train_resumable,
        op_kwargs={"steps": STEPS, "interval": INTERVAL, "step_s": 0.25},
        np=2,
        conn_id="spark_cluster",
        deploy_mode="client",
        deferrable=False,
        conf=CONF,
        poll_interval_s=1,
        max_restarts=1,
        outlets=[Asset("horovod_restart_in_job_model")],
    )
