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
    connection = {"conn_type": "aws", "login": s3_server.access_key, "password": s3_server.secret_key,
                  "extra": {"endpoint_url": s3_server.endpoint_url, "region_name": s3_server.region}}
    secret = s3_server.secret_key

    log, run = run_dag(airflow_home, dags, "horovod_object_storage", extra_env={
        "AIRFLOW_CONN_MINIO": json.dumps(connection), "HOROVOD_TEST_EVENT_LOG_DIR": str(events)})

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
