"""
Test DAGs: ``@task.torch_distributed`` and ``TorchDistributedOperator`` (a function, a torchrun script, a failure).
"""

from __future__ import annotations

import os

import pendulum
from airflow.sdk import DAG, Asset, task

from airflow_provider_horovod.operators.torch_distributed import TorchDistributedOperator

TORCHRUN_NAMES = (
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "NODE_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
)
SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ddp_script.py")


def fail_on_rank_one():
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    print("starting epoch 1", flush=True)
    if dist.get_rank() == 1:
        raise ValueError("corrupt shard on rank 1")
    dist.all_reduce(torch.ones(1))  # rank 0 waits in a collective rank 1 never joins: it must be stopped


with DAG(
    dag_id="torch_taskflow",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_tasks=1,
):

    @task.torch_distributed(
        np=2, conn_id=None, poll_interval_s=None, multiple_outputs=True, outlets=[Asset("ddp_taskflow_model")]
    )
    def train(scale: float) -> dict:
        import os

        import torch
        import torch.distributed as dist

        from airflow_provider_horovod.runtime import artifact_dir

        dist.init_process_group("gloo")
        total = torch.tensor([float(dist.get_rank() + 1) * scale])
        dist.all_reduce(total)
        envs = [None] * dist.get_world_size()
        dist.all_gather_object(envs, {name: os.environ.get(name) for name in TORCHRUN_NAMES})
        rank = dist.get_rank()
        dist.destroy_process_group()
        if rank != 0:
            return {}
        path = os.path.join(artifact_dir(), "model.txt")
        with open(path, "w") as f:
            f.write(f"total={total.item()}")
        return {"model_path": path, "total": total.item(), "envs": envs}

    @task
    def report(model_path: str, total: float) -> str:
        return f"{model_path}|{total:.1f}"

    trained = train(10.0)
    report(trained["model_path"], trained["total"])

    TorchDistributedOperator(
        task_id="script",
        script=SCRIPT,
        script_args=["--epochs", 3, "--tag", "{{ run_id }}"],
        np=2,
        conn_id=None,
        poll_interval_s=None,
        driver_log_verbosity="all",
    )

with DAG(
    dag_id="torch_failures",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    default_args={"retries": 0},
):
    TorchDistributedOperator(task_id="rank_fails", python_callable=fail_on_rank_one, np=2, conn_id=None)
