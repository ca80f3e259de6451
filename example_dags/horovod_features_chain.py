"""
A data-to-model chain in Airflow 3's own terms: three DAGs linked by assets.

``features_etl`` (a Spark step, ``@task.pyspark``) turns scikit-learn's bundled digits into a Parquet dataset and
updates the ``digits_features`` asset -> ``retrain_on_features`` (scheduled on that asset) trains on it with
``@task.horovod`` (2 ranks, each reading its own equal shard of the Parquet files) and updates ``digits_model``,
whose event carries the model's location -> ``evaluate_and_promote`` (scheduled on the model asset) reads the model
from the triggering event, measures it on the held-out digits and promotes it to ``production/`` only when it
beats the production model.

Trigger only the first DAG; the others run from asset events. Everything runs on an embedded local Spark bound to
127.0.0.1 and writes under ``$HOROVOD_EXAMPLE_ROOT`` (default ``$AIRFLOW_HOME/horovod-chain``). See
``docs/data-to-model-chains.md``.
"""

from __future__ import annotations

import os

import pendulum
from airflow.sdk import DAG, Asset, task

ROOT = os.environ.get("HOROVOD_EXAMPLE_ROOT") or os.path.join(
    os.environ.get("AIRFLOW_HOME") or os.path.expanduser("~/airflow"), "horovod-chain"
)
FEATURES = Asset("digits_features", uri="file://" + os.path.join(os.path.abspath(ROOT), "features"))
MODEL = Asset("digits_model")
LOCAL_SPARK = {
    "spark.master": "local[2]",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
}
START = pendulum.datetime(2026, 1, 1, tz="UTC")


def build_model():
    """A small MLP for 8x8 digit images (64 inputs, 10 classes)."""
    import torch

    return torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))


def load_split(features_dir: str, split: str):
    """``(x, y)`` tensors of a whole split (for evaluation on one process)."""
    import numpy as np
    import pyarrow.dataset as ds
    import torch

    table = ds.dataset(os.path.join(features_dir, split), format="parquet", ignore_prefixes=[".", "_"]).to_table()
    x = np.stack(table.column("features").to_numpy(zero_copy_only=False)).astype("float32")
    return torch.tensor(x), torch.tensor(table.column("label").to_numpy(), dtype=torch.long)


with DAG(
    dag_id="features_etl",
    schedule=None,
    start_date=START,
    catchup=False,
    tags=["horovod", "example", "chain"],
    doc_md=__doc__,
):

    @task.pyspark(config_kwargs=LOCAL_SPARK, outlets=[FEATURES])
    def write_features(spark=None, sc=None) -> str:
        """Digits -> Parquet (pixels scaled to [0, 1]): ``train/`` in 3 part files, ``test/`` in one."""
        from sklearn.datasets import load_digits

        x, y = load_digits(return_X_y=True)
        rows = [([float(v) / 16.0 for v in image], int(label)) for image, label in zip(x, y, strict=True)]
        frame = spark.createDataFrame(rows, "features array<float>, label int")
        train, test = frame.randomSplit([0.8, 0.2], seed=7)
        target = FEATURES.uri.removeprefix("file://")
        train.repartition(3).write.mode("overwrite").parquet(os.path.join(target, "train"))
        test.coalesce(1).write.mode("overwrite").parquet(os.path.join(target, "test"))
        print(f"wrote {train.count()} training and {test.count()} held-out digits to {target}")
        return target

    write_features()


with DAG(
    dag_id="retrain_on_features",
    schedule=[FEATURES],
    start_date=START,
    catchup=False,
    tags=["horovod", "example", "chain"],
    doc_md=__doc__,
):

    @task.horovod(np=2, conn_id=None, outlets=[MODEL], env_vars={"OMP_NUM_THREADS": "1"}, multiple_outputs=True)
    def retrain(features_dir: str, epochs: int = 25, batch_size: int = 32) -> dict:
        """Each rank trains on its own equal shard of the Parquet training set; rank 0 saves the model."""
        import horovod.torch as hvd
        import numpy as np
        import torch

        from airflow_provider_horovod.runtime import artifact_dir, rank_shard

        hvd.init()
        torch.manual_seed(0)
        torch.set_num_threads(1)
        shard = rank_shard(os.path.join(features_dir, "train"))  # same row count on every rank
        x = torch.tensor(np.stack(shard.column("features").to_numpy(zero_copy_only=False)).astype("float32"))
        y = torch.tensor(shard.column("label").to_numpy(), dtype=torch.long)
        model = build_model()
        optimizer = hvd.DistributedOptimizer(
            torch.optim.SGD(model.parameters(), lr=0.05 * hvd.size(), momentum=0.9),
            named_parameters=model.named_parameters(),
        )
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        loss_fn = torch.nn.CrossEntropyLoss()
        steps = len(x) // batch_size
        for _epoch in range(epochs):
            order = torch.randperm(len(x))
            for step in range(steps):
                idx = order[step * batch_size : (step + 1) * batch_size]
                optimizer.zero_grad()
                loss = loss_fn(model(x[idx]), y[idx])
                loss.backward()
                optimizer.step()
        final = hvd.allreduce(loss.detach(), op=hvd.Average).item()
        if hvd.rank() != 0:
            return {}
        path = os.path.join(artifact_dir(), "model.pt")
        torch.save(model.state_dict(), path)
        print(f"trained on {len(x)} rows per rank x {hvd.size()} ranks; final loss {final:.4f}; saved {path}")
        return {"model_path": path, "final_loss": round(final, 4)}

    retrain(FEATURES.uri.removeprefix("file://"))


with DAG(
    dag_id="evaluate_and_promote",
    schedule=[MODEL],
    start_date=START,
    catchup=False,
    tags=["horovod", "example", "chain"],
    doc_md=__doc__,
):

    @task
    def evaluate_and_promote(triggering_asset_events=None) -> dict:
        """Evaluate the model named by the triggering event; promote it if it beats production."""
        import json
        import shutil

        import torch

        event = triggering_asset_events[MODEL][-1]
        model_path = next(p for p in event.extra["artifact_paths"] if p.endswith("model.pt"))
        model = build_model()
        model.load_state_dict(torch.load(model_path))
        model.eval()
        x, y = load_split(FEATURES.uri.removeprefix("file://"), "test")
        with torch.no_grad():
            accuracy = float((model(x).argmax(dim=1) == y).float().mean())
        production = os.path.join(ROOT, "production")
        record = os.path.join(production, "metrics.json")
        current = json.load(open(record))["accuracy"] if os.path.exists(record) else None
        promoted = current is None or accuracy > current
        print(
            f"model {model_path} (Spark application {event.extra['spark_app_id']}): held-out accuracy "
            f"{accuracy:.4f}; production: {current}; promoted: {promoted}"
        )
        if promoted:
            os.makedirs(production, exist_ok=True)
            shutil.copy(model_path, os.path.join(production, "model.pt"))
            with open(record, "w") as f:
                json.dump({"accuracy": accuracy, "source": model_path, "run_extra": event.extra}, f)
        return {"accuracy": accuracy, "promoted": promoted, "model_path": model_path}

    evaluate_and_promote()
