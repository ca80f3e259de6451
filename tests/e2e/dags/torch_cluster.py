"""Test DAG: ``TorchDistributedOperator`` deferred in cluster deploy mode on a Spark standalone cluster."""

from __future__ import annotations

import sys

import pendulum

from airflow.sdk import DAG, Asset
from airflow_provider_horovod.operators.torch_distributed import TorchDistributedOperator

CONF = {"spark.pyspark.python": sys.executable, "spark.pyspark.driver.python": sys.executable,
        "spark.driver.cores": "1", "spark.driver.memory": "512m", "spark.executor.memory": "512m",
        "spark.cores.max": "2"}


def ddp_train_and_save(steps: int):
    """A few DDP steps of a tiny model; rank 0 saves it and returns what the ranks agreed on."""
    import os

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
    weights = [None] * dist.get_world_size()
    dist.all_gather_object(weights, model.module.weight.detach().tolist())
    rank, size, master = dist.get_rank(), dist.get_world_size(), os.environ["MASTER_ADDR"]
    dist.destroy_process_group()
    if rank != 0:
        return None
    path = os.path.join(artifact_dir(), "model.pt")
    torch.save(model.module.state_dict(), path)
    return {"model_path": path, "world_size": size, "same_weights": weights[0] == weights[1], "master_addr": master}


with DAG(dag_id="torch_cluster_deferred", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
         catchup=False, default_args={"retries": 0}):
    TorchDistributedOperator(task_id="train", python_callable=ddp_train_and_save, op_kwargs={"steps": 3}, np=2,
                             conn_id="spark_cluster", deploy_mode="cluster", deferrable=True, conf=CONF,
                             poll_interval_s=1, outlets=[Asset("torch_cluster_model")])
