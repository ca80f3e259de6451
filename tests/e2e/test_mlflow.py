"""
MLflow end to end: a real tracking server (tests/mlflow_server.py) and one real Airflow deployment for the module.

np=2 training through the operator (example_dags/mlflow_retraining.py) makes exactly one run with its tags, params
(the operator's and rank 0's own ``mlflow.log_params``), the ``report()`` loss history, one registered model version
with the alias ``candidate``; the asset-triggered ``mlflow_promote`` DAG moves ``champion`` to it; the "MLflow run"
link and the XComs point at the run. A failing rank leaves a FAILED run with the failure's headline; a retried task
leaves two runs with their try tags. The connection's token appears in no task log and no XCom.

Cluster deploy mode on a real standalone cluster (one for the module; the driver, which logs ``report()``'s metrics,
runs on a worker): a sync and a deferred task each make exactly one FINISHED run with the driver's metrics; a durable
task whose task process is SIGKILLed mid-training keeps its first try's run when the retry reattaches; a deferred task
marked failed ends its run KILLED from the triggerer. The token is in none of their task logs, XComs, Spark event logs
or the cluster's files.
"""

from __future__ import annotations

import json
import signal
import uuid
from pathlib import Path

import psutil
import pytest

from tests.airflow_deployment import DeploymentError, _poll, airflow_deployment, copy_dags
from tests.integration.shared_cluster_jobs import wait_until
from tests.mlflow_server import mlflow_server  # noqa: F401  (fixture)
from tests.standalone import standalone_cluster

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

REPO = Path(__file__).resolve().parents[2]
TOKEN = f"mlflow-tok-{uuid.uuid4().hex}"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    # two cluster-mode jobs at once (each: a driver core and np=2 task slots, 512m each for the driver and executors)
    with standalone_cluster(
        workers=2, cores_per_worker=3, memory_per_worker="2g", work_dir=tmp_path_factory.mktemp("standalone")
    ) as c:
        yield c


@pytest.fixture(scope="module")
def event_log_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("spark-events")


@pytest.fixture(scope="module")
def airflow(tmp_path_factory, mlflow_server, cluster, event_log_dir):  # noqa: F811
    dags = copy_dags(
        tmp_path_factory.mktemp("mlflow-dags"),
        REPO / "example_dags" / "mlflow_retraining.py",
        REPO / "tests" / "e2e" / "dags" / "horovod_mlflow_failures.py",
        REPO / "tests" / "e2e" / "dags" / "horovod_mlflow_cluster.py",
    )
    connection = {"conn_type": "http", "host": mlflow_server, "password": TOKEN}  # a bearer token (no login)
    env = {
        "AIRFLOW_CONN_MLFLOW_DEFAULT": json.dumps(connection),
        "AIRFLOW_CONN_SPARK_CLUSTER": cluster.airflow_connection(),
        "AIRFLOW__HOROVOD__ARTIFACT_ROOT": str(tmp_path_factory.mktemp("artifacts")),  # the "shared filesystem"
        "HOROVOD_TEST_EVENT_LOG_DIR": str(event_log_dir),
    }
    with airflow_deployment(
        dags,
        home=tmp_path_factory.mktemp("mlflow-home"),
        components=("api-server", "scheduler", "dag-processor", "triggerer"),
        extra_env=env,
    ) as deployment:
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
    assert airflow.wait_for_run("mlflow_retraining", train_run, timeout_s=300) == "success", airflow.task_log(
        "mlflow_retraining", train_run, "train"
    )[-4000:]
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

    xcom = {
        key: airflow.xcom("mlflow_retraining", train_run, "train", key)
        for key in ("mlflow_run_id", "mlflow_run_url", "model_version")
    }
    assert xcom["mlflow_run_id"] == run.info.run_id and xcom["model_version"] == "1"
    assert xcom["mlflow_run_url"] == f"{mlflow_server}/#/experiments/{run.info.experiment_id}/runs/{run.info.run_id}"
    links = airflow.api("GET", f"/api/v2/dags/mlflow_retraining/dagRuns/{train_run}/taskInstances/train/links").json()
    assert links["extra_links"]["MLflow run"] == xcom["mlflow_run_url"], links
    version = client.get_model_version("digits_classifier", "1")
    assert version.run_id == run.info.run_id and "candidate" in version.aliases
    # the asset event triggers mlflow_promote, which makes the candidate the champion (there was none); the
    # events are read after that run has started (see AirflowDeployment.asset_events)
    wait_until(
        lambda: "champion" in client.get_model_version("digits_classifier", "1").aliases,
        timeout_s=180,
        what="mlflow_promote to set the champion alias",
    )
    (event,) = airflow.asset_events(source_dag_id="mlflow_retraining")
    assert event["extra"]["mlflow_run_id"] == run.info.run_id and event["extra"]["model_version"] == "1"
    assert [dag_run["dag_id"] for dag_run in event["created_dagruns"]] == ["mlflow_promote"], event

    assert airflow.wait_for_run("horovod_mlflow_failures", failures_run, timeout_s=300) == "failed"
    (failed,) = _runs(client, "failures")
    assert failed.info.status == "FAILED"
    assert "rank 1 ran out of data" in failed.data.tags["horovod.error"]
    retried = sorted(_runs(client, "retries"), key=lambda r: r.data.tags["airflow.try_number"])
    assert [(r.data.tags["airflow.try_number"], r.info.status) for r in retried] == [("1", "FAILED"), ("2", "FINISHED")]

    logs = "".join(
        airflow.task_log(dag, run_id, task, try_number)
        for dag, run_id, task, try_number in (
            ("mlflow_retraining", train_run, "train", 1),
            ("horovod_mlflow_failures", failures_run, "rank_fails", 1),
            ("horovod_mlflow_failures", failures_run, "retried", 1),
            ("horovod_mlflow_failures", failures_run, "retried", 2),
        )
    )
    assert "MLflow run" in logs and TOKEN not in logs
    values = []
    for dag, run_id in (("mlflow_retraining", train_run), ("horovod_mlflow_failures", failures_run)):
        entries = airflow.api("GET", f"/api/v2/dags/{dag}/dagRuns/{run_id}/taskInstances/~/xcomEntries").json()
        values += [
            airflow.xcom(dag, run_id, e["task_id"], e["key"], map_index=e["map_index"], default=None)
            for e in entries["xcom_entries"]
        ]
    everything = json.dumps(values, default=str)
    assert run.info.run_id in everything and TOKEN not in everything


# --- cluster deploy mode ------------------------------------------------------------------------------------------


def _log(airflow, dag_id: str, run_id: str, task_id: str = "train", try_number: int = 1) -> str:
    """The try's log so far ("" before the try has started writing one)."""
    try:
        return airflow.task_log(dag_id, run_id, task_id, try_number=try_number)
    except DeploymentError:
        return ""


def _ti(airflow, dag_id: str, run_id: str, task_id: str = "train") -> dict:
    return next(ti for ti in airflow.task_instances(dag_id, run_id) if ti["task_id"] == task_id)


def _task_process(ti_id: str) -> psutil.Process | None:
    """The task process running try ``ti_id`` (below the LocalExecutor worker that supervises it)."""
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = " ".join(proc.info.get("cmdline") or [])
        if ti_id in cmdline and "LocalExecutor" not in cmdline:
            return proc
    return None


def _one_run(client, experiment: str):
    runs = _runs(client, experiment)
    assert len(runs) == 1, [(r.info.run_id, r.data.tags.get("airflow.try_number"), r.info.status) for r in runs]
    return runs[0]


def _loss(client, run_id: str) -> list[tuple[int, float]]:
    return sorted((m.step, m.value) for m in client.get_metric_history(run_id, "loss"))


def _assert_no_token(airflow, dag_id: str, run_id: str) -> None:
    """The token is in no log of any try of the run's tasks and in none of its XComs."""
    tries = airflow.tries(dag_id, run_id)
    logs = "".join(
        airflow.task_log(dag_id, run_id, task, n) for task, last in tries.items() for n in range(1, last + 1)
    )
    assert "MLflow run" in logs and TOKEN not in logs
    entries = airflow.api("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/~/xcomEntries").json()
    values = [
        airflow.xcom(dag_id, run_id, e["task_id"], e["key"], map_index=e["map_index"], default=None)
        for e in entries["xcom_entries"]
    ]
    everything = json.dumps(values, default=str)
    assert "mlflow_run_id" in {e["key"] for e in entries["xcom_entries"]} and TOKEN not in everything


def _files_with(root: Path, text: str) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and text.encode() in p.read_bytes()]


def test_cluster_mode_sync_and_deferred_each_make_one_run_with_the_drivers_metrics(
    airflow,
    mlflow_server,  # noqa: F811  (the fixture)
    cluster,
    event_log_dir,
):
    airflow.unpause("mlflow_cluster")
    run_id = airflow.trigger("mlflow_cluster")
    assert airflow.wait_for_run("mlflow_cluster", run_id, timeout_s=400) == "success", {
        task: _log(airflow, "mlflow_cluster", run_id, task)[-3000:] for task in ("sync", "deferred")
    }
    client = _client(mlflow_server)
    app_ids = []
    for task in ("sync", "deferred"):
        run = _one_run(client, f"cluster_{task}")
        tags = run.data.tags
        assert run.info.status == "FINISHED", (task, run.info.status, tags.get("horovod.error"))
        assert (
            tags["airflow.dag_id"],
            tags["airflow.run_id"],
            tags["airflow.task_id"],
            tags["airflow.try_number"],
        ) == ("mlflow_cluster", run_id, task, "1")
        app_id = airflow.xcom("mlflow_cluster", run_id, task, "spark_app_id")
        assert app_id.startswith("app-") and tags["spark.app_id"] == app_id
        app_ids.append(app_id)
        # logged by the driver on the worker, with the URI and token the submission gave it: every report, in order
        assert _loss(client, run.info.run_id) == [(s, pytest.approx(1.0 / s)) for s in range(1, 11)]
        assert airflow.xcom("mlflow_cluster", run_id, task, "mlflow_run_id") == run.info.run_id
        url = f"{mlflow_server}/#/experiments/{run.info.experiment_id}/runs/{run.info.run_id}"
        assert airflow.xcom("mlflow_cluster", run_id, task, "mlflow_run_url") == url
        links = airflow.api("GET", f"/api/v2/dags/mlflow_cluster/dagRuns/{run_id}/taskInstances/{task}/links").json()
        assert links["extra_links"]["MLflow run"] == url, links
    assert "Pausing task as DEFERRED" in _log(airflow, "mlflow_cluster", run_id, "deferred")
    _assert_no_token(airflow, "mlflow_cluster", run_id)
    # the Spark event log of both applications (uncompressed: a compressed one would hide the token from a grep)
    for app_id in app_ids:
        assert _files_with(event_log_dir, app_id), sorted(event_log_dir.rglob("*"))
    assert _files_with(event_log_dir, "SparkListenerEnvironmentUpdate")
    assert not _files_with(event_log_dir, TOKEN)
    assert not _files_with(cluster.work_dir, TOKEN)  # the drivers' and executors' logs, the workers' own


def test_a_durable_retry_that_reattaches_keeps_the_first_trys_run(airflow, mlflow_server):  # noqa: F811
    client = _client(mlflow_server)
    airflow.unpause("mlflow_cluster_durable")
    run_id = airflow.trigger("mlflow_cluster_durable")

    def training() -> bool:  # the driver is RUNNING and its first metrics are in the run
        runs = _runs(client, "cluster_durable")
        return (
            "is RUNNING" in _log(airflow, "mlflow_cluster_durable", run_id)
            and len(runs) == 1
            and bool(client.get_metric_history(runs[0].info.run_id, "loss"))
        )

    _poll("the driver to run and log its first metrics", training, timeout_s=300, interval_s=1)
    submission = airflow.xcom("mlflow_cluster_durable", run_id, "train", "spark_submission_id")
    first = _ti(airflow, "mlflow_cluster_durable", run_id)
    _poll("the try's task process", lambda: _task_process(first["id"]), timeout_s=30).send_signal(signal.SIGKILL)

    assert airflow.wait_for_run("mlflow_cluster_durable", run_id, timeout_s=300) == "success", _log(
        airflow, "mlflow_cluster_durable", run_id, try_number=2
    )[-4000:]
    assert _ti(airflow, "mlflow_cluster_durable", run_id)["try_number"] == 2
    retry_log = _log(airflow, "mlflow_cluster_durable", run_id, try_number=2)
    assert "Submitted driver" not in retry_log, retry_log[-4000:]  # it reattached, or read the finished result
    assert airflow.xcom("mlflow_cluster_durable", run_id, "train", "spark_submission_id") == submission
    run = _one_run(client, "cluster_durable")  # no second run for the second try
    assert f"MLflow run {run.info.run_id} kept from the try that submitted the job" in retry_log, retry_log[-4000:]
    assert run.info.status == "FINISHED"
    assert run.data.tags["airflow.try_number"] == "1" and run.data.tags["airflow.reattached_try_number"] == "2"
    assert _loss(client, run.info.run_id) == [(s, pytest.approx(1.0 / s)) for s in range(1, 21)]
    assert airflow.xcom("mlflow_cluster_durable", run_id, "train", "mlflow_run_id") == run.info.run_id
    _assert_no_token(airflow, "mlflow_cluster_durable", run_id)


def test_a_deferred_task_marked_failed_ends_its_run_killed(airflow, mlflow_server, cluster):  # noqa: F811
    client = _client(mlflow_server)
    airflow.unpause("mlflow_cluster_killed")
    run_id = airflow.trigger("mlflow_cluster_killed")
    # the trigger's own line, once deferred (a trigger dropped before it started would never get on_kill)
    _poll(
        "the trigger to watch the RUNNING driver",
        lambda: (
            _ti(airflow, "mlflow_cluster_killed", run_id)["state"] == "deferred"
            and "is RUNNING" in _log(airflow, "mlflow_cluster_killed", run_id)
        ),
        timeout_s=300,
        interval_s=2,
    )
    submission = airflow.xcom("mlflow_cluster_killed", run_id, "train", "spark_submission_id")
    assert _one_run(client, "cluster_killed").info.status == "RUNNING"
    airflow.api(
        "PATCH",
        f"/api/v2/dags/mlflow_cluster_killed/dagRuns/{run_id}/taskInstances/train",
        json={"new_state": "failed"},
    )

    run = _poll(
        "the run to end KILLED",
        lambda: (r := _one_run(client, "cluster_killed")).info.status == "KILLED" and r,
        timeout_s=120,
        interval_s=1,
        on_timeout=lambda: f"\ntask log:\n{_log(airflow, 'mlflow_cluster_killed', run_id)[-4000:]}",
    )
    assert run.data.tags["horovod.error"] == (
        f"killed while deferred (the task was marked failed or success, or cleared): driver {submission} killed"
    )
    assert run.info.end_time
    _poll(
        f"the master to report driver {submission} KILLED",
        lambda: any(
            d["id"] == submission and d["state"] == "KILLED" for d in cluster.master_json().get("completeddrivers", [])
        ),
        timeout_s=120,
    )
    assert _ti(airflow, "mlflow_cluster_killed", run_id)["state"] == "failed"
    _assert_no_token(airflow, "mlflow_cluster_killed", run_id)
