"""``@task.horovod`` as DAG authors write it: closures and DAG-file helpers, multiple_outputs, mapping, assets."""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, Asset, AssetAlias, task

SCALE = 10  # a DAG-file global the function uses: it travels by value
MODEL = Asset("taskflow_model")
PER_RUN = AssetAlias("taskflow_per_run_models")


def helper_defined_in_the_dag_file(x: float) -> float:
    return x * SCALE


with DAG(
    dag_id="horovod_taskflow",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_tasks=1,
):

    @task
    def learning_rates() -> list[float]:
        return [0.1, 0.2]

    @task.horovod(np=2, conn_id=None, poll_interval_s=None, multiple_outputs=True, outlets=[MODEL, PER_RUN])
    def train(lr: float, epochs: int = 2) -> dict:
        import os

        import horovod.torch as hvd
        import torch

        from airflow_provider_horovod.runtime import artifact_dir

        hvd.init()
        total = hvd.allreduce(torch.tensor([helper_defined_in_the_dag_file(lr)]), op=hvd.Sum).item()
        if hvd.rank() != 0:
            return {}
        path = os.path.join(artifact_dir(), "model.txt")
        with open(path, "w") as f:
            f.write(f"lr={lr}")
        return {"model_path": path, "total": round(total, 6), "epochs": epochs, "size": hvd.size()}

    @task
    def report(model_path: str, total: float) -> str:
        return f"{model_path}|{total:.1f}"

    trained = train(0.5)
    report(trained["model_path"], trained["total"])

    @task.horovod(np=2, conn_id=None, poll_interval_s=None, timeline=True)
    def sweep(lr: float, epochs: int) -> float:
        import horovod.torch as hvd
        import torch

        hvd.init()
        total = hvd.allreduce(torch.tensor([lr * epochs]), op=hvd.Sum).item()
        return total if hvd.rank() == 0 else None

    sweep.partial(epochs=3).expand(lr=learning_rates())
