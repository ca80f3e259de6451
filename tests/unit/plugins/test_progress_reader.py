"""Reading a try's progress files: partial writes, missing files, thinning, and object storage credentials."""

from __future__ import annotations

import json

from airflow_provider_horovod.plugins.progress_reader import (
    history,
    parse_records,
    parse_snapshot,
    read_progress,
    storage_options,
)
from tests.s3_server import s3_server  # noqa: F401  (fixture)


def _record(step, loss, time=100.0, **extra):
    return {"time": time, "rank": 0, "step": step, "total_steps": 10, "epoch": 0, "metrics": {"loss": loss, **extra}}


def test_missing_files_give_no_progress(tmp_path):
    assert read_progress(tmp_path) == {"progress": None, "history": {"x": "step", "count": 0, "metrics": {}}}
    assert read_progress(tmp_path / "not-created-yet")["progress"] is None


def test_a_partial_last_line_and_a_half_written_snapshot_are_skipped(tmp_path):
    lines = [json.dumps(_record(1, 0.5)), json.dumps(_record(2, 0.4)), '{"time": 1.0, "ra']
    (tmp_path / "metrics.jsonl").write_text("\n".join(lines))
    (tmp_path / "progress.json").write_text('{"time": 1.0, "state": "run')
    answer = read_progress(tmp_path)
    assert answer["progress"] is None
    assert answer["history"] == {"x": "step", "count": 2, "metrics": {"loss": [[1, 0.5], [2, 0.4]]}}


def test_snapshot_is_returned_as_written(tmp_path):
    snapshot = {"time": 5.0, "state": "running", "step": 3, "ranks": {"0": {"step": 3, "time": 5.0}}}
    (tmp_path / "progress.json").write_text(json.dumps(snapshot))
    assert read_progress(str(tmp_path))["progress"] == snapshot
    assert parse_snapshot("[1, 2]") is None and parse_snapshot("") is None


def test_metrics_vary_per_record_and_non_numbers_are_left_out():
    records = parse_records(
        "\n".join(
            json.dumps(r)
            for r in [
                _record(1, 0.9),
                _record(2, 0.8, acc=0.5),
                _record(3, float("nan"), acc=True, note="x"),
                "not a dict",
            ]
        )
    )
    assert history(records)["metrics"] == {"loss": [[1, 0.9], [2, 0.8]], "acc": [[2, 0.5]]}


def test_without_steps_the_x_axis_is_seconds_since_the_first_report():
    records = [_record(None, 1.0, time=100.0), _record(None, 0.5, time=101.5)]
    assert history(records) == {"x": "time_s", "count": 2, "metrics": {"loss": [[0.0, 1.0], [1.5, 0.5]]}}


def test_long_histories_are_thinned_keeping_first_and_last():
    records = [_record(step, 1.0 / step) for step in range(1, 10_001)]
    thinned = history(records, max_points=100)["metrics"]["loss"]
    assert len(thinned) == 100 and thinned[0][0] == 1 and thinned[-1][0] == 10_000
    assert [p[0] for p in thinned] == sorted(p[0] for p in thinned)
    assert len(history(records, max_points=0)["metrics"]["loss"]) == 10_000


def test_an_aws_connection_becomes_s3fs_options(monkeypatch):
    monkeypatch.setenv(
        "AIRFLOW_CONN_STORE",
        json.dumps(
            {
                "conn_type": "aws",
                "login": "AKID",
                "password": "secret",
                "extra": {"endpoint_url": "http://127.0.0.1:9000", "region_name": "eu-west-1"},
            }
        ),
    )
    assert storage_options("store") == {
        "key": "AKID",
        "secret": "secret",
        "endpoint_url": "http://127.0.0.1:9000",
        "client_kwargs": {"region_name": "eu-west-1"},
    }
    assert storage_options(None) == {}


def test_object_storage_is_read_with_the_connection(s3_server, monkeypatch):  # noqa: F811
    """The moto S3 server on 127.0.0.1: a try's files read through ``s3://conn_id@bucket/...``."""
    monkeypatch.setenv(
        "AIRFLOW_CONN_STORE",
        json.dumps(
            {
                "conn_type": "aws",
                "login": s3_server.access_key,
                "password": s3_server.secret_key,
                "extra": {"endpoint_url": s3_server.endpoint_url, "region_name": s3_server.region},
            }
        ),
    )
    fs = s3_server.fs()
    fs.mkdir("models")
    fs.pipe("models/run/try-1/metrics.jsonl", (json.dumps(_record(1, 0.5)) + "\n").encode())
    fs.pipe("models/run/try-1/progress.json", json.dumps({"state": "finished", "step": 1}).encode())
    answer = read_progress("s3://store@models/run/try-1")
    assert answer["progress"] == {"state": "finished", "step": 1}
    assert answer["history"]["metrics"] == {"loss": [[1, 0.5]]}
    assert read_progress("s3://store@models/run/try-2")["progress"] is None
