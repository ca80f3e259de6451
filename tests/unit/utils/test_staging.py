"""Cluster-mode staging on a shared filesystem and on S3 (moto's server on 127.0.0.1): the calls the hook, the
trigger and the durable operator make, with the connection's credentials read from Airflow."""

from __future__ import annotations

import json
import urllib.request

import pytest

from airflow_provider_horovod.exceptions import HorovodJobError
from airflow_provider_horovod.utils.staging import Staging, fs_options, with_conn_id
from tests.s3_server import s3_server  # noqa: F401  (fixture)


@pytest.fixture
def minio(s3_server, monkeypatch):  # noqa: F811
    """An ``aws`` connection ``minio`` to the test store, as Airflow reads it from the environment."""
    monkeypatch.setenv(
        "AIRFLOW_CONN_MINIO",
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
    if not fs.exists("stage"):
        fs.mkdir("stage")
    return s3_server


def test_object_store_staging_round_trip(minio):
    staging = Staging("s3://minio@stage/.staging/dag/run/train/try-2")
    assert not staging.is_local and staging.uri == "s3://stage/.staging/dag/run/train/try-2"
    assert staging.record == "s3://minio@stage/.staging/dag/run/train/try-2"
    assert Staging(staging.record).uri == staging.uri  # what the task state store and the trigger keep
    assert staging.credentials["AWS_SECRET_ACCESS_KEY"] == minio.secret_key
    assert staging.read_bytes("status.json") is None  # not written yet

    staging.write_bytes("payload.bin", b"\x00payload")
    assert staging.read_bytes("payload.bin") == b"\x00payload"
    assert minio.fs().cat("stage/.staging/dag/run/train/try-2/payload.bin") == b"\x00payload"
    # how a Spark worker fetches the driver program: plain HTTP, no credentials of its own
    with urllib.request.urlopen(staging.signed_url("payload.bin"), timeout=30) as response:
        assert response.read() == b"\x00payload"

    staging.remove()
    assert staging.read_bytes("payload.bin") is None


def test_siblings_are_the_other_tries_with_a_submission(minio):
    tries = {n: Staging(f"s3://minio@stage/.staging/dag/run/t/try-{n}") for n in (1, 2, 3)}
    tries[1].write_bytes("submission.json", b'{"submission_id": "driver-1"}')
    tries[2].write_bytes("submission.json", b'{"submission_id": "driver-2"}')
    tries[3].write_bytes("payload.bin", b"x")  # this try: staged, not submitted yet
    Staging("s3://minio@stage/.staging/dag/run/other/try-1").write_bytes("submission.json", b"{}")

    siblings = tries[3].siblings_with("submission.json")

    assert [s.record for s in siblings] == [tries[1].record, tries[2].record]
    assert json.loads(siblings[1].read_bytes("submission.json")) == {"submission_id": "driver-2"}


def test_local_staging_is_owner_only(tmp_path):
    staging = Staging(f"file://{tmp_path}/try-1")
    assert staging.is_local and staging.record == f"{tmp_path}/try-1" and staging.credentials == {}
    staging.create()
    staging.write_bytes("payload.bin", b"p")
    assert (tmp_path / "try-1" / "payload.bin").stat().st_mode & 0o777 == 0o600
    assert (tmp_path / "try-1").stat().st_mode & 0o777 == 0o700
    Staging(tmp_path / "try-0").create()
    Staging(tmp_path / "try-0").write_bytes("submission.json", b"{}")
    assert [s.uri for s in staging.siblings_with("submission.json")] == [str(tmp_path / "try-0")]
    with pytest.raises(HorovodJobError, match="presign"):
        # a filesystem path has nothing to presign: cluster mode hands the worker the path itself
        staging.signed_url("payload.bin")


def test_credentials_become_s3fs_options():
    env = {
        "AWS_ACCESS_KEY_ID": "id",
        "AWS_SECRET_ACCESS_KEY": "s",
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9",
        "AWS_DEFAULT_REGION": "eu-west-1",
    }
    assert fs_options(env) == {
        "key": "id",
        "secret": "s",
        "endpoint_url": "http://127.0.0.1:9",
        "client_kwargs": {"region_name": "eu-west-1"},
    }
    assert fs_options({}) == {}
    assert with_conn_id("s3://b/p", "c") == "s3://c@b/p" and with_conn_id("/tmp/x", "c") == "/tmp/x"
