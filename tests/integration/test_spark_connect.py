"""The barrier job over Spark Connect: a real Connect server on 127.0.0.1, no JVM in the caller.

The operator runs under ``airflow dags test`` (real Airflow), with a real MLflow tracking server for its tracking.
Each client runs in its own interpreter: PySpark refuses a remote session in a process that already has a
classic one (the other integration tests' ``local[2]`` session lives in the pytest process).
"""

from __future__ import annotations

import json
import uuid

import pytest

from tests.client_script import run_client_script
from tests.connect_server import connect_server
from tests.mlflow_server import mlflow_server  # noqa: F401  (fixture)

pytestmark = [pytest.mark.spark, pytest.mark.timeout(400)]

CLIENT = """
import json, sys
from pyspark.sql import SparkSession
from airflow_provider_horovod.runtime import HorovodRunner, RankFailedError
from airflow_provider_horovod.runtime.driver.connect import is_connect_session

spark = SparkSession.builder.remote(sys.argv[1]).getOrCreate()
assert is_connect_session(spark)

def allreduce(value):
    import horovod.torch as hvd, torch
    from airflow_provider_horovod.runtime import report
    hvd.init()
    total = hvd.allreduce(torch.tensor([float(hvd.rank() + 1)]), op=hvd.Sum)
    print(f"connect rank {hvd.rank()} total {total.item()}", flush=True)
    for step in (1, 2, 3):
        report(step=step, total_steps=3, loss=1.0 / step)
    return {"rank": hvd.rank(), "size": hvd.size(), "total": total.item(), "value": value, "blob": "x" * 3_000_000}

def fail_on_rank_one():
    import horovod.torch as hvd, torch
    hvd.init()
    if hvd.rank() == 1:
        raise ValueError("bad shard over Connect")
    hvd.allreduce(torch.ones(1))

def killed_once(out):
    import os, signal
    import horovod.torch as hvd, torch
    from airflow_provider_horovod.runtime import restart_count
    hvd.init()
    hvd.allreduce(torch.ones(1))
    if restart_count() == 0 and hvd.rank() == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    hvd.allreduce(torch.ones(1))
    return {"restart_count": restart_count(), "size": hvd.size()}

out = {}
if sys.argv[2] == "restart":  # max_restarts over Connect: the client's loop submits the barrier job again
    runner = HorovodRunner(np=2, spark=spark, max_restarts=1, min_np=1)  # no elastic ranks over Connect: it says so
    out = {"value": runner.run(killed_once, out=sys.argv[3]), "causes": [r.cause for r in runner.restarts]}
elif sys.argv[2] == "hook_fail":  # the operator's path: HorovodConnectHook, errors as in every deploy mode
    import os
    from urllib.parse import urlparse
    from airflow_provider_horovod.exceptions import HorovodJobError
    from airflow_provider_horovod.hooks.connect import HorovodConnectHook
    from airflow_provider_horovod.job import TrainingJob
    from airflow_provider_horovod.runtime.settings import JobSettings
    from airflow_provider_horovod.runtime.wire.payload import dumps_payload
    url = urlparse(sys.argv[1].replace("sc://", "http://"))
    os.environ["AIRFLOW_CONN_HOROVOD_CONNECT"] = json.dumps({"conn_type": "spark_connect", "host": url.hostname,
                                                              "port": url.port})
    try:
        HorovodConnectHook(conn_id="horovod_connect").run(TrainingJob(
            key=b"", payload=dumps_payload(fail_on_rank_one), settings=JobSettings(np=2), artifact_dir=sys.argv[3],
            label="test"))
    except HorovodJobError as err:
        out = {"type": type(err).__name__, "rank": err.rank, "message": str(err)}
elif sys.argv[2] == "ok":
    runner = HorovodRunner(np=2, spark=spark, artifact_dir=sys.argv[3])
    result = runner.run(allreduce, value="c")
    out = {"blob_len": len(result.pop("blob")), **result, "metrics": runner.last_metrics}
else:
    try:
        HorovodRunner(np=2, spark=spark).run(fail_on_rank_one)
    except RankFailedError as err:
        out = {"rank": err.rank, "message": str(err)}
print("RESULT " + json.dumps(out), flush=True)
spark.stop()
"""


@pytest.fixture(scope="module")
def connect_url(tmp_path_factory):
    with connect_server(tmp_path_factory.mktemp("connect")) as url:
        yield url


def _client(tmp_path, url: str, mode: str) -> tuple[dict, str]:
    return run_client_script(CLIENT, tmp_path / "client.py", [url, mode, str(tmp_path / "art")], timeout_s=300)


def test_np2_over_spark_connect(connect_url, tmp_path):
    result, stdout = _client(tmp_path, connect_url, "ok")
    assert result == {
        "blob_len": 3_000_000,
        "rank": 0,
        "size": 2,
        "total": 3.0,
        "value": "c",  # several rows
        "metrics": {"loss": 1.0 / 3},
    }
    assert "[rank 0] connect rank 0 total 3.0" in stdout  # output came back over the log channel
    # report() records came back over the same channel: the progress line in this (the task's) process, the files
    assert "airflow-provider-horovod: progress: step 3/3 (100%)" in stdout
    assert (tmp_path / "art" / "metrics.jsonl").read_text().splitlines()[-1].startswith('{"time"')


def test_a_killed_rank_restarts_the_job_over_spark_connect(connect_url, tmp_path):
    result, stdout = _client(tmp_path, connect_url, "restart")
    assert result == {"value": {"restart_count": 1, "size": 2}, "causes": ["rank 1 killed by SIGKILL"]}, result
    assert "airflow-provider-horovod: restart 1/1: rank 1 killed by SIGKILL" in stdout
    unused = "airflow-provider-horovod: min_np=1 is not used over Spark Connect (the server's Spark schedules the"
    assert stdout.count(unused) == 1, stdout[-3000:]  # said once, at the first attempt


def test_failing_rank_over_spark_connect(connect_url, tmp_path):
    result, _ = _client(tmp_path, connect_url, "fail")
    assert result["rank"] == 1 and "bad shard over Connect" in result["message"]


def test_a_failing_rank_through_the_connect_hook_is_a_horovod_job_error_naming_it(connect_url, tmp_path):
    result, _ = _client(tmp_path, connect_url, "hook_fail")
    assert result["type"] == "HorovodJobError" and result["rank"] == 1, result
    assert "bad shard over Connect" in result["message"] and "rank 1" in result["message"], result


def _connect_env(connect_url: str) -> dict[str, str]:
    from urllib.parse import urlparse

    url = urlparse(connect_url.replace("sc://", "http://"))
    return {
        "AIRFLOW_CONN_SPARK_CONNECT_TEST": json.dumps(
            {"conn_type": "spark_connect", "host": url.hostname, "port": url.port}
        )
    }


def test_operator_with_a_spark_connect_connection(connect_url, airflow_home, tmp_path):
    """Real Airflow: a ``spark_connect`` connection runs the job through Connect from the task process."""
    import os
    import shutil

    from tests.e2e.test_dags import HERE, run_dag

    dags = tmp_path / "dags"
    dags.mkdir()
    shutil.copy(HERE / "dags" / "horovod_connect.py", dags)
    log, run = run_dag(airflow_home, dags, "horovod_connect", extra_env=_connect_env(connect_url))
    assert run["states"] == {"train": "success"}, log[-5000:]
    assert run["xcom"]["train.return_value"] == {"size": 2, "total": 3.0}
    assert run["xcom"]["train.spark_app_id"].startswith("local-")  # the Connect server's application
    paths = run["xcom"]["train.artifact_paths"]
    assert [os.path.basename(p) for p in paths] == ["model.pt"] and os.path.isfile(paths[0])
    assert "Spark Connect session to sc://127.0.0.1" in log
    assert "[rank 0] connect training on rank 0" in log
    assert "Spark-Submit cmd" not in log  # no spark-submit JVM was started for this task


def test_mlflow_tracking_over_spark_connect(connect_url, airflow_home, tmp_path, mlflow_server):  # noqa: F811
    """
    Real Airflow, a real Connect server and a real MLflow tracking server: the task itself (where the metrics
    collector runs over Connect) logs ``report()``'s metrics into the try's one run, which ends FINISHED with its
    tags and params; a failing rank ends its run FAILED. The connection's token is in no log line and no XCom.
    """
    import shutil

    from mlflow import MlflowClient

    from tests.e2e.test_dags import HERE, run_dag

    token = f"mlflow-tok-{uuid.uuid4().hex}"
    dags = tmp_path / "dags"
    dags.mkdir()
    shutil.copy(HERE / "dags" / "horovod_connect_mlflow.py", dags)
    env = {
        **_connect_env(connect_url),
        "AIRFLOW_CONN_MLFLOW_TEST": json.dumps({"conn_type": "http", "host": mlflow_server, "password": token}),
    }  # a bearer token (no login)
    log, run = run_dag(airflow_home, dags, "horovod_connect_mlflow", extra_env=env)
    assert run["states"] == {"train": "success", "rank_fails": "failed"}, log[-5000:]
    xcom = run["xcom"]
    client = MlflowClient(mlflow_server)

    def runs(experiment: str) -> list:
        found = client.get_experiment_by_name(experiment)
        return [] if found is None else client.search_runs([found.experiment_id])

    (trained,) = runs("connect_training")
    tags = trained.data.tags
    assert trained.info.status == "FINISHED"
    assert (tags["airflow.dag_id"], tags["airflow.run_id"], tags["airflow.task_id"], tags["airflow.try_number"]) == (
        "horovod_connect_mlflow",
        run["run_id"],
        "train",
        "1",
    ), tags
    # the Connect server's application (its local[2] master), the same id as the XCom
    assert tags["spark.app_id"].startswith("local-") and tags["spark.app_id"] == xcom["train.spark_app_id"], tags
    assert trained.data.params == {"np": "2", "launcher": "horovod", "steps": "4", "lr": "0.5"}
    history = sorted(client.get_metric_history(trained.info.run_id, "loss"), key=lambda m: m.step)
    # rank 0 sends its newest record at most every SEND_INTERVAL_S, and always each metric's first and last one
    # (runtime/reports.py):
    # the first and the last report, each at its step with its value
    steps = [m.step for m in history]
    assert steps[0] == 1 and steps[-1] == 4 and steps == sorted(set(steps)), steps
    assert all(m.value == pytest.approx(0.5 / m.step) for m in history), history
    assert "airflow-provider-horovod: progress: step 4/4 (100%)" in log  # the collector ran in the task
    assert xcom["train.mlflow_run_id"] == trained.info.run_id
    assert xcom["train.mlflow_run_url"].endswith(f"/runs/{trained.info.run_id}")
    assert xcom["train.return_value"] == {"size": 2, "loss": pytest.approx(0.125)}

    (failed,) = runs("connect_failures")
    assert failed.info.status == "FAILED"
    assert failed.data.tags["airflow.task_id"] == "rank_fails"
    assert (
        "rank 1" in failed.data.tags["horovod.error"] and "bad shard over Connect" in failed.data.tags["horovod.error"]
    ), failed.data.tags
    assert xcom["rank_fails.mlflow_run_id"] == failed.info.run_id

    assert f"MLflow run {trained.info.run_id} created" in log
    assert token not in log and token not in json.dumps(xcom, default=str)
