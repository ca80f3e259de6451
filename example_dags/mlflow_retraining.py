"""
Retrain -> evaluate -> promote, with MLflow (docs/mlflow.md).

``mlflow_retraining``: np=2 training through ``HorovodRunnerOperator`` into one MLflow run per try (``report()``'s
loss as the run's metric history), the model file registered as a new version of ``digits_classifier`` with the alias
``candidate``; the task's model asset event carries ``mlflow_run_id``, ``model_version`` and the metrics.
``mlflow_promote`` runs on that asset event: it evaluates the candidate (here: its final loss, from the run) and
moves the alias ``champion`` to it when it beats the current champion (or there is none).

Set the connection ``mlflow_default`` (type ``http``, host the tracking URI, login/password or a token).
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, Asset, task

from airflow_provider_horovod.operators.horovod import HorovodRunnerOperator

MODEL = "digits_classifier"
MODEL_ASSET = Asset("mlflow_digits_model")


def train(epochs: int = 3, steps_per_epoch: int = 20, lr: float = 0.1):
    """A small training: every rank reports; rank 0 saves the model and returns where it is."""
    import os

    import horovod.torch as hvd
    import torch

    from airflow_provider_horovod.runtime import artifact_dir, report

    hvd.init()
    torch.manual_seed(0)
    x = torch.randn(256, 8)
    y = (x.sum(dim=1, keepdim=True) > 0).float()
    model = torch.nn.Linear(8, 1)
    optimizer = hvd.DistributedOptimizer(
        torch.optim.SGD(model.parameters(), lr=lr), named_parameters=model.named_parameters()
    )
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    total = epochs * steps_per_epoch
    for step in range(1, total + 1):
        optimizer.zero_grad()
        loss = torch.nn.functional.binary_cross_entropy_with_logits(model(x), y)
        loss.backward()
        optimizer.step()
        report(step=step, total_steps=total, epoch=(step - 1) // steps_per_epoch + 1, loss=loss.item())
    if hvd.rank() != 0:
        return None
    import mlflow  # rank 0 only: MLFLOW_RUN_ID in its environment makes start_run() resume the task's run

    with mlflow.start_run():
        mlflow.log_params({"world_size": hvd.size(), "lr": lr})
    path = os.path.join(artifact_dir(), "model.pt")
    torch.save(model.state_dict(), path)
    return {"model_path": path, "loss": loss.item()}


with DAG(
    dag_id="mlflow_retraining",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["horovod", "mlflow"],
):
    HorovodRunnerOperator(
        task_id="train",
        python_callable=train,
        op_kwargs={"epochs": 3, "lr": 0.1},
        np=2,
        mlflow_conn_id="mlflow_default",
        mlflow_experiment="{{ dag.dag_id }}",
        mlflow_register_model=MODEL,
        mlflow_model_alias="candidate",
        outlets=[MODEL_ASSET],
    )


with DAG(
    dag_id="mlflow_promote",
    schedule=[MODEL_ASSET],
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["horovod", "mlflow"],
):

    @task
    def evaluate(triggering_asset_events=None) -> dict:
        """The candidate named by the asset event, and its score (lower loss is better) next to the champion's."""
        from airflow_provider_horovod.hooks.mlflow import MlflowHook

        event = triggering_asset_events[MODEL_ASSET][-1]
        client = MlflowHook("mlflow_default").get_conn()

        def loss_of(version) -> float:
            return client.get_run(version.run_id).data.metrics["loss"]

        candidate = client.get_model_version(MODEL, event.extra["model_version"])
        try:
            champion = client.get_model_version_by_alias(MODEL, "champion")
        except Exception:  # noqa: BLE001 - no champion yet
            champion = None
        return {
            "version": candidate.version,
            "loss": loss_of(candidate),
            "champion": champion.version if champion else None,
            "champion_loss": loss_of(champion) if champion else None,
        }

    @task
    def promote(scores: dict) -> str | None:
        """Move ``champion`` to the candidate when it beats the champion; return the champion's version."""
        from airflow_provider_horovod.hooks.mlflow import MlflowHook

        if scores["champion_loss"] is not None and scores["loss"] >= scores["champion_loss"]:
            print(
                f"version {scores['version']} (loss {scores['loss']:.4f}) does not beat champion "
                f"{scores['champion']} ({scores['champion_loss']:.4f})"
            )
            return scores["champion"]
        MlflowHook("mlflow_default").get_conn().set_registered_model_alias(MODEL, "champion", scores["version"])
        print(f"champion is now version {scores['version']} (loss {scores['loss']:.4f})")
        return scores["version"]

    promote(evaluate())
