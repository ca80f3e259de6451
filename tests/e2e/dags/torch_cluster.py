"""Test DAGs: ``TorchDistributedOperator`` in cluster deploy mode on a Spark standalone cluster, deferred, and durable
(sync, with a retry that reattaches to the running driver after the task process dies)."""

from __future__ import annotations

import sys
from datetime import timedelta

import pendulum
from airflow.sdk import DAG, Asset

from airflow_provider_horovod.operators.torch_distributed import TorchDistributedOperator

CONF = {
    "spark.pyspark.python": sys.executable,
    "spark.pyspark.driver.python": sys.executable,
    "spark.driver.cores": "1",
    "spark.driver.memory": "512m",
    "spark.executor.memory": "512m",
    "spark.cores.max": "2",
}


def ddp_train_and_save(steps: int, pause_s: float = 0.0):
    """A few DDP steps of a tiny model, ``pause_s`` seconds apart; rank 0 saves it and returns what the ranks agreed
    on."""
    import os
    import time

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from airflow_provider_horovod.runtime import artifact_dir

    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(int(steps)):
        optimizer.zero_grad()
        model(torch.full((8, 4), float(dist.get_rank() + 1))).pow(2).mean().backward()
        optimizer.step()
        time.sleep(float(pause_s))
    weights = [None] * dist.get_world_size()
    dist.all_gather_object(weights, model.module.weight.detach().tolist())
    rank, size, master = dist.get_rank(), dist.get_world_size(), os.environ["MASTER_ADDR"]
    dist.destroy_process_group()
    if rank != 0:
        return None
    path = os.path.join(artifact_dir(), "model.pt")
    torch.save(model.module.state_dict(), path)
    return {
        "model_path": path,
        "world_size": size,
        "same_weights": weights[0] == weights[1],
        "master_addr": master,
        "steps": int(steps),
    }


with DAG(
    dag_id="torch_cluster_deferred",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    default_args={"retries": 0},
):
    TorchDistributedOperator(
        task_id="train",
        python_callable=ddp_train_and_save,
        op_kwargs={"steps": 3},
        np=2,
        conn_id="spark_cluster",
        deploy_mode="cluster",
        deferrable=True,
        conf=CONF,
        poll_interval_s=1,
        outlets=[Asset("torch_cluster_model")],
    )

# Durable reattach (sync): the test SIGKILLs the task process while the driver RUNS; the retry reattaches to it.
with DAG(
    dag_id="torch_durable",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    default_args={"retries": 1, "retry_delay": timedelta(seconds=0)},
):
    TorchDistributedOperator(
        task_id="train",
        python_callable=ddp_train_and_save,
        op_kwargs={"steps": 20, "pause_s": 1},
        np=2,
        conn_id="spark_cluster",
        deploy_mode="cluster",
        deferrable=False,
        conf=CONF,
        poll_interval_s=1,
    )
