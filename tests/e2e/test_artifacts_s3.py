"""End to end: the operator writes its model to S3 (moto on 127.0.0.1) with an ObjectStoragePath's connection,
and the connection's secret shows up nowhere but in the ranks' environment."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.e2e.test_dags import run_dag
from tests.s3_server import s3_server  # noqa: F401  (fixture)

pytestmark = [pytest.mark.e2e, pytest.mark.spark]

HERE = Path(__file__).resolve().parent


def test_operator_writes_model_to_s3_without_leaking_the_secret(airflow_home, tmp_path, s3_server):  # noqa: F811
    dags = tmp_path / "dags"
    dags.mkdir()
    shutil.copy(HERE / "dags" / "horovod_object_storage.py", dags)
    events = tmp_path / "spark-events"
    events.mkdir()
    fs = s3_server.fs()
    fs.mkdir("models")
    connection = {
        "conn_type": "aws",
        "login": s3_server.access_key,
        "password": s3_server.secret_key,
        "extra": {"endpoint_url": s3_server.endpoint_url, "region_name": s3_server.region},
    }
    secret = s3_server.secret_key

    log, run = run_dag(
        airflow_home,
        dags,
        "horovod_object_storage",
        extra_env={"AIRFLOW_CONN_MINIO": json.dumps(connection), "HOROVOD_TEST_EVENT_LOG_DIR": str(events)},
    )

    assert run["states"] == {"train": "success"}, log[-5000:]
    xcom = run["xcom"]
    assert xcom["train.artifact_dir"] == "s3://models/x"
    assert xcom["train.artifact_paths"] == ["s3://models/x/model.pt"]
    assert fs.exists("models/x/model.pt") and fs.size("models/x/model.pt") > 0
    value = xcom["train.return_value"]
    assert value["model_path"] == "s3://models/x/model.pt"
    # present where it is needed ...
    assert value["has_secret"] is True
    # ... and nowhere else: the driver's and spark-submit's command lines (read by the rank from its ancestors;
    # the spark-submit command is also in the task log), the task log, every XCom, the Spark UI's environment
    assert value["ancestors"] >= 2 and value["secret_on_a_command_line"] is False
    assert "Spark-Submit cmd" in log or "spark-submit" in log
    assert secret not in log
    assert secret not in json.dumps(run)
    event_logs = [p for p in events.rglob("*") if p.is_file()]  # Spark 4 rolls them: eventlog_v2_<app>/...
    assert event_logs, "Spark wrote no event log"
    text = "".join(p.read_text(errors="replace") for p in event_logs)
    assert "SparkListenerEnvironmentUpdate" in text and "spark.eventLog.dir" in text
    assert secret not in text


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    from tests.standalone import standalone_cluster

    with standalone_cluster(workers=2, cores_per_worker=2, work_dir=tmp_path_factory.mktemp("standalone")) as c:
        yield c


@pytest.mark.timeout(900)
def test_cluster_mode_stages_through_s3_without_a_shared_filesystem(
    airflow_home,
    tmp_path,
    s3_server,  # noqa: F811
    cluster,
):
    """
    Standalone cluster deploy mode with ``artifact_root`` on S3: payload, runtime, driver program and results go
    through the store (the worker fetches the driver program by a presigned URL), sync and deferred; the
    connection's credentials reach the driver and the ranks and appear nowhere else.
    """
    dags = tmp_path / "dags"
    dags.mkdir()
    shutil.copy(HERE / "dags" / "horovod_object_storage_cluster.py", dags)
    fs = s3_server.fs()
    fs.mkdir("staged")
    connection = {
        "conn_type": "aws",
        "login": s3_server.access_key,
        "password": s3_server.secret_key,
        "extra": {"endpoint_url": s3_server.endpoint_url, "region_name": s3_server.region},
    }

    events = tmp_path / "spark-events"
    events.mkdir()
    log, run = run_dag(
        airflow_home,
        dags,
        "horovod_object_storage_cluster",
        extra_env={
            "AIRFLOW_CONN_MINIO": json.dumps(connection),
            "AIRFLOW_CONN_SPARK_CLUSTER": cluster.airflow_connection(),
            "AIRFLOW__HOROVOD__ARTIFACT_ROOT": "s3://minio@staged/root",
            "HOROVOD_TEST_EVENT_LOG_DIR": str(events),
        },
    )

    assert run["states"] == {"sync": "success", "deferred": "success"}, log[-6000:] + cluster.log_tail(30)
    xcom = run["xcom"]
    for task in ("sync", "deferred"):
        value = xcom[f"{task}.return_value"]
        assert value["size"] == 2 and value["total"] == 3.0
        artifact_dir = xcom[f"{task}.artifact_dir"]
        assert artifact_dir.startswith("s3://staged/root/horovod_object_storage_cluster/") and artifact_dir.endswith(
            f"/{task}/try-1"
        )
        assert xcom[f"{task}.artifact_paths"] == [f"{artifact_dir}/{task}.pt"] == [value["model_path"]]
        assert fs.size(value["model_path"].removeprefix("s3://")) > 0
        assert xcom[f"{task}.spark_submission_id"].startswith("driver-")
        assert xcom[f"{task}.spark_app_id"].startswith("app-")
        # the driver ran from the store: its arguments are URIs, the credentials were in its environment only
        assert value["has_secret"] and value["driver_processes"] >= 1 and value["driver_args_are_uris"]
        assert value["credentials_on_driver_command_line"] is False
    # the staging directories are on S3, with what the driver wrote back
    staged = fs.glob("staged/root/.staging/horovod_object_storage_cluster/*/*/try-1/*")
    for task in ("sync", "deferred"):
        names = {p.rsplit("/", 1)[1] for p in staged if f"/{task}/try-1/" in p}
        assert {
            "payload.bin",
            "airflow_provider_horovod_runtime.zip",
            "horovod_driver.py",
            "submission.json",
            "status.json",
            "result.json",
            "result.pkl",
        } <= names, staged
    # each driver ran from the worker's downloaded copy of the driver program
    fetched = list(cluster.work_dir.glob("worker-*/**/driver-*/horovod_driver.py"))
    assert len(fetched) == 2, fetched
    # the secret (and the key id) nowhere but the ranks' and the driver's environment: task log, XComs, the
    # drivers' launch commands and logs on the workers, the master's state
    secret, key_id = s3_server.secret_key, s3_server.access_key
    worker_logs = "".join(p.read_text(errors="replace") for p in cluster.work_dir.glob("worker-*/**/driver-*/std*"))
    assert "Launch Command" in worker_logs and "{{USER_JAR}}" not in worker_logs
    event_logs = "".join(p.read_text(errors="replace") for p in events.rglob("*") if p.is_file())
    apps = {xcom["sync.spark_app_id"], xcom["deferred.spark_app_id"]}
    assert len(apps) == 2 and all(app in event_logs for app in apps)  # both applications' event logs ...
    assert "SparkListenerEnvironmentUpdate" in event_logs  # ... with what their Environment page shows
    for text in (log, json.dumps(run), worker_logs, json.dumps(cluster.master_json()), event_logs):
        assert secret not in text and key_id not in text
    # the workers' own logs record the driver program's presigned URL (the key id, as S3 URLs carry it, and a
    # signature that reads that one object), never the secret
    cluster_logs = "".join(p.read_text(errors="replace") for p in cluster.log_dir.glob("*.log"))
    assert "Copying user jar http://127.0.0.1:" in cluster_logs and secret not in cluster_logs
