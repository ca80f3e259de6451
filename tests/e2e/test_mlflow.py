"""
MLflow end to end: a real tracking server (tests/mlflow_server.py) and one real Airflow deployment for the module.

np=2 training through the operator (example_dags/mlflow_retraining.py) makes exactly one run with its tags, params
(the operator's and rank 0's own ``mlflow.log_params``), the ``report()`` loss history, one registered model version
with the alias ``candidate``; the asset-triggered ``mlflow_promote`` DAG moves ``champion`` to it; the "MLflow run"
link and the XComs point at the run. A failing rank leaves a FAILED run with the failure's headline; a retried task
leaves two runs with their try tags. The connection's token appears in no task log and no XCom.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from tests.airflow_deployment import airflow_deployment, copy_dags
from tests.integration.shared_cluster_jobs import wait_until
from tests.mlflow_server import mlflow_server  # noqa: F401  (fixture)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

REPO = Path(__file__).resolve().parents[2]
TOKEN = f"mlflow-tok-{uuid.uuid4().hex}"


@pytest.fixture(scope="module")
def airflow(tmp_path_factory, mlflow_server):  # noqa: F811
    dags = copy_dags(tmp_path_factory.mktemp("mlflow-dags"), REPO / "example_dags" / "mlflow_retraining.py",
                     REPO / "tests" / "e2e" / "dags" / "horovod_mlflow_failures.py")
    connection = {"conn_type": "http", "host": mlflow_server, "password": TOKEN}  # a bearer token (no login)
    with airflow_deployment(dags, home=tmp_path_factory.mktemp("mlflow-home"),
                            components=("api-server", "scheduler", "dag-processor"),
                            extra_env={"AIRFLOW_CONN_MLFLOW_DEFAULT": json.dumps(connection)}) as deployment:
        yield deployment


def _client(url):
    from mlflow import MlflowClient

    return MlflowClient(url)


def _runs(client, experiment):
    found = client.get_experiment_by_name(experiment)
    return [] if found is None else client.search_runs([found.experiment_id])


def test_training_run_registered_model_and_promotion(airflow, mlflow_server):  # noqa: F811
    for dag_id in ("mlflow_retraining", "mlflow_promote", "horovod_mlflow_failures"):
        airflow.unpause(dag_id)
    train_run = airflow.trigger("mlflow_retraining")
    failures_run = airflow.trigger("horovod_mlflow_failures")
    assert airflow.wait_for_run("mlflow_retraining", train_run, timeout_s=300) == "success", \
        airflow.task_log("mlflow_retraining", train_run, "train")[-4000:]
    client = _client(mlflow_server)

    (run,) = _runs(client, "mlflow_retraining")
    tags, params = run.data.tags, run.data.params
    assert tags["airflow.dag_id"] == "mlflow_retraining" and tags["airflow.task_id"] == "train"
    assert tags["airflow.run_id"] == train_run and tags["airflow.try_number"] == "1"
    assert tags["airflow.map_index"] == "-1" and tags["spark.app_id"].startswith("local-")
    assert params["np"] == "2" and params["launcher"] == "horovod" and params["epochs"] == "3"
    assert params["world_size"] == "2"  # rank 0's mlflow.start_run() resumed the task's run
    assert run.info.status == "FINISHED"
    history = client.get_metric_history(run.info.run_id, "loss")
    steps = [m.step for m in history]
    assert len(history) >= 2 and steps == sorted(steps) and steps[-1] == 60, steps  # the last report is logged
    assert history[-1].value < history[0].value

    xcom = {key: airflow.xcom("mlflow_retraining", train_run, "train", key)
            for key in ("mlflow_run_id", "mlflow_run_url", "model_version")}
    assert xcom["mlflow_run_id"] == run.info.run_id and xcom["model_version"] == "1"
    assert xcom["mlflow_run_url"] == f"{mlflow_server}/#/experiments/{run.info.experiment_id}/runs/{run.info.run_id}"
    links = airflow.api("GET", f"/api/v2/dags/mlflow_retraining/dagRuns/{train_run}/taskInstances/train/links").json()
    assert links["extra_links"]["MLflow run"] == xcom["mlflow_run_url"], links
    version = client.get_model_version("digits_classifier", "1")
    assert version.run_id == run.info.run_id and "candidate" in version.aliases
    (event,) = airflow.asset_events(source_dag_id="mlflow_retraining")
    assert event["extra"]["mlflow_run_id"] == run.info.run_id and event["extra"]["model_version"] == "1"

    # the asset event triggers mlflow_promote, which makes the candidate the champion (there was none)
    wait_until(lambda: "champion" in client.get_model_version("digits_classifier", "1").aliases, timeout_s=180,
               what="mlflow_promote to set the champion alias")

    assert airflow.wait_for_run("horovod_mlflow_failures", failures_run, timeout_s=300) == "failed"
    (failed,) = _runs(client, "failures")
    assert failed.info.status == "FAILED"
    assert "rank 1 ran out of data" in failed.data.tags["horovod.error"]
    retried = sorted(_runs(client, "retries"), key=lambda r: r.data.tags["airflow.try_number"])
    assert [(r.data.tags["airflow.try_number"], r.info.status) for r in retried] == [("1", "FAILED"),
                                                                                       ("2", "FINISHED")]

    logs = "".join(airflow.task_log(dag, run_id, task, try_number) for dag, run_id, task, try_number in (
        ("mlflow_retraining", train_run, "train", 1), ("horovod_mlflow_failures", failures_run, "rank_fails", 1),
        ("horovod_mlflow_failures", failures_run, "retried", 1),
        ("horovod_mlflow_failures", failures_run, "retried", 2)))
    assert "MLflow run" in logs and TOKEN not in logs
    values = []
    for dag, run_id in (("mlflow_retraining", train_run), ("horovod_mlflow_failures", failures_run)):
        entries = airflow.api("GET", f"/api/v2/dags/{dag}/dagRuns/{run_id}/taskInstances/~/xcomEntries").json()
        values += [airflow.xcom(dag, run_id, e["task_id"], e["key"], map_index=e["map_index"], default=None)
                   for e in entries["xcom_entries"]]
    everything = json.dumps(values, default=str)
    assert run.info.run_id in everything and TOKEN not in everything
