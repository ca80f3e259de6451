"""Artifact locations on object storage: the URI the ranks get, and a connection's credentials as AWS_* variables."""

from __future__ import annotations

import json

import pytest

from airflow_provider_horovod.utils.storage import credentials_env, storage_location


def test_plain_locations_pass_through():
    assert storage_location("/data/models") == ("/data/models", None)
    assert storage_location("file:///data/models") == ("file:///data/models", None)
    assert storage_location("s3://bucket/run") == ("s3://bucket/run", None)


def test_conn_id_in_a_uri_is_split_off():
    assert storage_location("s3://minio@bucket/root/dag/run") == ("s3://bucket/root/dag/run", "minio")


def test_object_storage_path_keeps_its_connection():
    from airflow.sdk import ObjectStoragePath

    assert storage_location(ObjectStoragePath("s3://bucket/x/", conn_id="minio")) == ("s3://bucket/x", "minio")
    assert storage_location(ObjectStoragePath("s3://bucket/x")) == ("s3://bucket/x", None)


def test_aws_connection_becomes_standard_variables(monkeypatch):
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
    assert credentials_env("store") == {
        "AWS_ACCESS_KEY_ID": "AKID",
        "AWS_SECRET_ACCESS_KEY": "secret",
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9000",
        "AWS_DEFAULT_REGION": "eu-west-1",
    }


def test_other_connection_types_are_refused(monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_GCS", json.dumps({"conn_type": "google_cloud_platform"}))
    with pytest.raises(ValueError, match="only 'aws' connections"):
        credentials_env("gcs")
