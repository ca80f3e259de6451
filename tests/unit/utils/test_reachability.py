"""A wrong Spark master address fails at once, naming the address (client and cluster deploy mode)."""

from __future__ import annotations

import json
import socket
import time

import pytest

from airflow_provider_horovod.exceptions import HorovodJobError
from airflow_provider_horovod.hooks.horovod import HorovodHook
from airflow_provider_horovod.job import TrainingJob
from airflow_provider_horovod.runtime.settings import JobSettings
from airflow_provider_horovod.standalone.hook import HorovodStandaloneHook
from airflow_provider_horovod.utils.spark_conf import check_reachable, master_addresses
from tests.standalone import free_port


def test_master_addresses():
    assert master_addresses("spark://m:7077") == [("m", 7077)]
    assert master_addresses("spark://m1:7077,m2:7078") == [("m1", 7077), ("m2", 7078)]
    assert master_addresses("spark://m") == [("m", 7077)]
    assert master_addresses("spark://[::1]:7077") == [("::1", 7077)]
    assert master_addresses("yarn") == [] and master_addresses("local[2]") == []


def test_one_listening_address_is_enough():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        check_reachable("spark://x", [("127.0.0.1", free_port()), ("127.0.0.1", port)])  # no error


def test_nothing_listening_is_refused_with_the_address():
    port = free_port()
    with pytest.raises(
        HorovodJobError,
        match=rf"^cannot reach Spark master spark://127.0.0.1:{port} "
        rf"\(127.0.0.1:{port}: Connection refused\)",
    ):
        check_reachable(f"spark://127.0.0.1:{port}", [("127.0.0.1", port)])


def test_client_mode_fails_fast_before_spark_submit(tmp_path, monkeypatch):
    port = free_port()
    monkeypatch.setenv(
        "AIRFLOW_CONN_WRONG_MASTER", json.dumps({"conn_type": "spark", "host": "spark://127.0.0.1", "port": port})
    )
    hook = HorovodHook(conn_id="wrong_master")
    job = TrainingJob(key=b"k" * 32, payload=b"p", settings=JobSettings(np=2), artifact_dir=str(tmp_path / "art"))
    started = time.monotonic()
    with pytest.raises(
        HorovodJobError,
        match=rf"cannot reach Spark master spark://127.0.0.1:{port} .*"
        "connection 'wrong_master'",
    ):
        hook.run_job(job, payload_path=str(tmp_path / "payload.bin"), staging_dir=str(tmp_path))
    assert time.monotonic() - started < 10
    assert hook._submit is None  # spark-submit never started


def test_cluster_mode_fails_fast_before_staging(tmp_path, monkeypatch):
    port, rest = free_port(), free_port()
    monkeypatch.setenv(
        "AIRFLOW_CONN_WRONG_MASTER",
        json.dumps(
            {
                "conn_type": "spark",
                "host": "spark://127.0.0.1",
                "port": port,
                "extra": {"deploy-mode": "cluster", "spark.airflowProviderHorovod.restPort": rest},
            }
        ),
    )
    hook = HorovodStandaloneHook(conn_id="wrong_master")
    job = TrainingJob(key=b"k" * 32, payload=b"p", settings=JobSettings(np=2), artifact_dir=str(tmp_path))
    with pytest.raises(HorovodJobError, match=rf"cannot reach Spark master spark://127.0.0.1:{port} "):
        hook.submit(job, staging=tmp_path / "staging")
    assert not (tmp_path / "staging").exists()
    with socket.socket() as master:  # the master answers, its REST submission server does not
        master.bind(("127.0.0.1", port))
        master.listen()
        with pytest.raises(
            HorovodJobError,
            match=rf"cannot reach the Spark master's REST submission server "
            rf"http://127.0.0.1:{rest} .*spark.master.rest.enabled=true",
        ):
            hook.check_master_reachable()
