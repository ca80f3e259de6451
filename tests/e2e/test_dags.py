"""End to end: real Airflow (``airflow dags test`` on SQLite) driving real Spark and Horovod."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import cloudpickle
import pytest

from tests.conftest import REPO, VENV_BIN, airflow_env

pytestmark = [pytest.mark.e2e, pytest.mark.spark]

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def dags_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("dags")
    shutil.copy(REPO / "example_dags" / "horovod_digits_retraining.py", folder)
    shutil.copy(HERE / "dags" / "horovod_failures.py", folder)
    return folder


def run_dag(
    airflow_home: Path, dags_folder: Path, dag_id: str, extra_env: dict[str, str] | None = None
) -> tuple[str, dict]:
    env = {**airflow_env(airflow_home, dags_folder), **(extra_env or {})}
    proc = subprocess.run(
        [str(VENV_BIN / "airflow"), "dags", "test", dag_id], env=env, capture_output=True, text=True, timeout=900
    )
    log = proc.stdout + proc.stderr
    inspect = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "show_run.py"), "--json", dag_id],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return log, json.loads(inspect.stdout.strip().splitlines()[-1])


def loss_scalars(logdir: str) -> list[int]:
    """The steps of the ``loss/train`` scalars TensorBoard reads from ``logdir``."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(logdir)
    events.Reload()
    return [s.step for s in events.Scalars("loss/train")]


def timeline_ops(path: str) -> set[str]:
    """The operation names of a Horovod Timeline file, which must parse as JSON."""
    with open(path) as f:
        records = json.load(f)
    return {r["name"] for r in records if r.get("ph") in ("B", "E", "X") and "name" in r}


def test_example_dag_trains_and_evaluates(airflow_home, dags_folder):
    log, run = run_dag(airflow_home, dags_folder, "horovod_digits_retraining")
    assert run["states"] == {"prepare_data": "success", "train": "success", "evaluate": "success"}, log[-5000:]
    xcom = run["xcom"]
    paths, artifact_dir = xcom["train.artifact_paths"], xcom["train.artifact_dir"]
    assert all(os.path.isfile(p) and p.startswith(artifact_dir + "/") for p in paths)
    assert artifact_dir.endswith("/train/try-1")
    assert [p for p in paths if not p.startswith(artifact_dir + "/tensorboard/")] == [
        f"{artifact_dir}/horovod_timeline.json",
        f"{artifact_dir}/model.pt",
    ]
    assert xcom["train.spark_app_id"].startswith("local-")
    assert xcom["train.spark_ui_url"].startswith("http://127.0.0.1:")
    assert xcom["train._link_SparkUILink"] == xcom["train.spark_ui_url"]  # what the "Spark UI" link shows
    assert xcom["train.return_value"]["ranks"] == 2
    assert xcom["train.return_value"]["model_path"] == f"{artifact_dir}/model.pt"
    # TensorBoard: rank 0's SummaryWriter under tensorboard_dir(), pushed as XCom with the command that shows it
    logdir = xcom["train.tensorboard_dir"]
    assert logdir == f"{artifact_dir}/tensorboard"
    assert f"tensorboard --logdir {logdir}" in log
    assert loss_scalars(logdir) == list(range(1, 31))
    # report()'s history: every epoch's epoch_loss (sample=False) at its step, beside the sampled per-step loss
    with open(f"{artifact_dir}/metrics.jsonl") as f:
        records = [json.loads(line) for line in f]
    epoch_loss = [(r["epoch"], r["step"]) for r in records if "epoch_loss" in r.get("metrics", {})]
    assert epoch_loss == [(epoch, epoch * 22) for epoch in range(1, 31)], epoch_loss
    assert [r["step"] for r in records if "loss" in r.get("metrics", {})][-1] == 660
    assert set(xcom["train.metrics"]) == {"loss", "epoch_loss"}
    # the Horovod Timeline (timeline=True): valid JSON, holding the training's allreduce operations
    assert timeline_ops(f"{artifact_dir}/horovod_timeline.json") >= {"NEGOTIATE_ALLREDUCE", "ALLREDUCE"}
    assert xcom["evaluate.return_value"] >= 0.9
    # checkpoints every 5 epochs, 3 kept, in the task instance's directory beside the try's (docs/checkpoints.md)
    checkpoints = xcom["train.checkpoint_dir"]
    assert checkpoints == artifact_dir.rsplit("/", 1)[0] + "/checkpoints"
    assert sorted(f for f in os.listdir(checkpoints) if f.endswith(".json")) == [
        f"step-{epoch:012d}.json" for epoch in (20, 25, 30)
    ]
    assert (xcom["train.return_value"]["try_number"], xcom["train.return_value"]["resumed_from_epoch"]) == (1, 0)
    assert (
        f"[rank 0] airflow-provider-horovod: no checkpoint in {checkpoints}: starting from the beginning (try 1)" in log
    )
    # what the user sees in the task log
    assert f"Spark application {xcom['train.spark_app_id']} started" in log
    assert "[rank 0] epoch 30/30" in log and "[rank 1]" not in log
    assert "held-out accuracy of" in log


def test_failures_surface_in_the_task(airflow_home, dags_folder):
    log, run = run_dag(airflow_home, dags_folder, "horovod_failures")
    states = run["states"]
    assert states["on_driver"] == "success", log[-5000:]
    assert run["xcom"]["on_driver.return_value"]["size"] == 2
    assert run["xcom"]["on_driver.return_value"]["rank"] == 0

    assert states["rank_fails"] == "failed"
    assert "Horovod rank 1" in log and "ValueError: corrupt shard on rank 1" in log
    assert 'raise ValueError("corrupt shard on rank 1")' in log  # the rank's own traceback

    assert states["unstorable_return"] == "failed"
    assert "XCom cannot store" in log and "TrainedModel" in log
    kept = run["xcom"]["unstorable_return.artifact_paths"]
    assert sorted(os.path.basename(p) for p in kept) == ["weights-0.bin", "weights-1.bin"]
    assert all(os.path.isfile(p) for p in kept)  # the model files survive the refused return value

    # rank 0 refused its 50 KB return value before sending it (max_return_value_bytes=2000); the model is kept
    assert states["oversize_return"] == "failed"
    size = len(cloudpickle.dumps(b"w" * 50_000))
    model = f"{run['xcom']['oversize_return.artifact_dir']}/model.pt"
    assert run["xcom"]["oversize_return.artifact_paths"] == [model] and os.path.isfile(model)
    assert (
        f"[rank 0] airflow-provider-horovod: rank 0's return value (a bytes) is {size} bytes pickled, above "
        "max_return_value_bytes=2000: it is not sent to the driver"
    ) in log
    assert (
        f"HorovodResultError: rank 0 returned {size} bytes once serialized, above max_return_value_bytes=2000. "
        f"Write large results under artifact_dir() and return their paths; the model files are kept: {model}"
    ) in log
