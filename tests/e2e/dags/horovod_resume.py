"""
Test DAGs (issue #26): an example-shaped training that checkpoints every few steps and resumes, with ``retries=1``;
the tests kill the executor (cluster deploy mode) or the whole worker (client deploy mode) that runs one rank. And
(issue #36) the same training with ``max_restarts``: the lost executor restarts the job in the try, in client mode, in
cluster mode while the task is deferred, and in cluster mode with a retry that reattaches to the restarted driver;
and elastic ranks (``min_np=1``) on a cluster of the test's own (connection ``spark_elastic``, added by the test): a
lost worker shrinks the job to one rank, a new one grows it back to two at the next checkpoint.
"""

from __future__ import annotations

import sys
from datetime import timedelta
from typing import Any

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


def train_resumable(steps: int, interval: int, step_s: float, hold_in_restart: int | None = None):
    """
    ``steps`` steps of one allreduce and ``step_s`` s of work, a checkpoint every ``interval`` steps; rank 0 appends
    each step it trains (with its try, restart, world size and time) to ``steps.jsonl`` next to the checkpoint
    directory. In attempt ``hold_in_restart`` (its ``restart_count()``) every rank holds after its first step until a
    file ``release`` appears there (240 s at most): the test acts while that attempt runs (kills the task process, a
    rank, starts a worker) without racing the end of a 10 s training.
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
    where = os.path.dirname(checkpoint_dir().rstrip("/"))
    record = os.path.join(where, "steps.jsonl")
    for step in range(start + 1, steps + 1):
        weight += hvd.allreduce(torch.ones(1), op=hvd.Sum)
        time.sleep(step_s)
        report(step=step, total_steps=steps)
        if hvd.rank() == 0:
            with open(record, "a") as f:
                record_ = {
                    "try": try_number(),
                    "restart": restart_count(),
                    "size": hvd.size(),
                    "step": step,
                    "t": time.time(),
                }
                f.write(json.dumps(record_) + "\n")
            if step % interval == 0:
                save_checkpoint({"weight": weight}, step=step)
        if restart_count() == hold_in_restart and step == start + 1:
            deadline = time.monotonic() + 240
            while not os.path.exists(os.path.join(where, "release")) and time.monotonic() < deadline:
                time.sleep(0.2)
    if hvd.rank() != 0:
        return None
    return {
        "try_number": try_number(),
        "restart_count": restart_count(),
        "size": hvd.size(),
        "resumed_from_step": start,
        "trained_steps": [start + 1, steps],
        "weight": float(weight),
    }


def resumable_dag(dag_id: str, *, retries: int, hold_in_restart: int | None = None, **operator: Any) -> None:
    """
    A DAG ``dag_id`` of one ``train`` task: :func:`train_resumable` (40 steps of 0.25 s, a checkpoint every 5) at
    ``np=2`` on the ``spark_cluster`` connection, sync, with ``retries`` (no delay) and its model as an asset.

    :param dag_id: the DAG's id (its asset: ``<dag_id>_model``).
    :param retries: Airflow's retries, ``retry_delay`` 0.
    :param hold_in_restart: :func:`train_resumable`'s.
    :param operator: more :class:`HorovodRunnerOperator` arguments (``deploy_mode``, ``max_restarts``...), or ones
        that replace the defaults above.
    """
    kwargs = {"steps": STEPS, "interval": INTERVAL, "step_s": 0.25, "hold_in_restart": hold_in_restart}
    with DAG(
        dag_id=dag_id,
        schedule=None,
        start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
        catchup=False,
        default_args={"retries": retries, "retry_delay": timedelta(seconds=0)},
    ):
        HorovodRunnerOperator(
            **{
                "task_id": "train",
                "python_callable": train_resumable,
                "op_kwargs": kwargs,
                "np": 2,
                "conn_id": "spark_cluster",
                "deferrable": False,
                "conf": CONF,
                "poll_interval_s": 1,
                "outlets": [Asset(f"{dag_id}_model")],
                **operator,
            }
        )


# issue #26: the lost executor (cluster deploy mode) or worker (client) fails the try; the retry resumes
resumable_dag("horovod_resume_executor", retries=1, deploy_mode="cluster")
resumable_dag("horovod_resume_worker", retries=1, deploy_mode="client")
# issue #36: the driver restarts the job within the try
resumable_dag("horovod_restart_in_job", retries=0, deploy_mode="client", max_restarts=1)
# cluster deploy mode, deferred: the driver restarts the job while the triggerer waits for it
resumable_dag("horovod_restart_deferred", retries=0, deploy_mode="cluster", deferrable=True, max_restarts=1)
# cluster deploy mode, sync: the restarted attempt holds until the retry has reattached to its driver
resumable_dag("horovod_restart_reattach", retries=1, hold_in_restart=1, deploy_mode="cluster", max_restarts=1)
# client deploy mode on a cluster of two one-core workers: restart 1 runs one rank (held until the test has started the
# lost worker again and the driver has said it grows back), which stops after its next checkpoint; restart 2 (planned,
# which max_restarts=1 does not count) runs two
resumable_dag(
    "horovod_elastic_worker",
    retries=0,
    hold_in_restart=1,
    deploy_mode="client",
    conn_id="spark_elastic",
    min_np=1,
    elastic_wait_s=6,
    max_restarts=1,
)
