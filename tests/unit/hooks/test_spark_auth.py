"""
The Spark RPC secret on its way to a client-mode job (utils/spark_auth.py, hooks/horovod.py): refused in DAG code,
read from the connection's extra (which Airflow's secrets masker hides), written to an owner-only properties file
that the spark-submit command names instead of the secret (cluster mode: tests/unit/standalone/
test_gateway.py).
"""

from __future__ import annotations

import json
import stat

import pytest
from airflow.sdk import Connection

from airflow_provider_horovod.hooks.horovod import _SparkSubmit
from airflow_provider_horovod.job import TrainingJob
from airflow_provider_horovod.operators.common import check_spark_arguments
from airflow_provider_horovod.runtime.settings import JobSettings
from airflow_provider_horovod.utils.spark_auth import (
    AUTH_PROPERTIES_FILE,
    CONNECTION_SECRET_EXTRA,
    auth_submit_kwargs,
    connection_auth_secret,
)

SECRET = "unit-secret-\\with=backslash:and#more"


def _conn(**extra) -> Connection:
    return Connection(
        conn_id="spark_auth_unit", conn_type="spark", host="spark://127.0.0.1", port=7077, extra=json.dumps(extra)
    )


@pytest.mark.parametrize(
    "make",
    [
        lambda: check_spark_arguments(conf={"spark.authenticate.secret": "x"}, env_vars=None, spark_submit_kwargs=None),
        lambda: check_spark_arguments(conf=None, env_vars={"_SPARK_AUTH_SECRET": "x"}, spark_submit_kwargs=None),
        lambda: TrainingJob(
            key=b"k",
            payload=b"p",
            settings=JobSettings(np=2),
            artifact_dir="/a",
            conf={" spark.authenticate.secret": "x"},
        ),
        lambda: TrainingJob(
            key=b"k", payload=b"p", settings=JobSettings(np=2), artifact_dir="/a", env={"_SPARK_AUTH_SECRET": "x"}
        ),
    ],
)
def test_the_secret_in_dag_code_is_refused_naming_the_parameter(make):
    with pytest.raises(
        ValueError, match=r"(conf|env_vars)\[.*cannot be given in DAG code.*'spark.authenticate.secret'"
    ):
        make()


def test_other_authentication_settings_stay_allowed_in_conf():
    job = TrainingJob(
        key=b"k",
        payload=b"p",
        settings=JobSettings(np=2),
        artifact_dir="/a",
        conf={
            "spark.authenticate": "true",
            "spark.network.crypto.enabled": "true",
            "spark.authenticate.secret.file": "/etc/spark/secret",
        },
    )
    assert job.conf["spark.authenticate"] == "true"


def test_the_extra_is_masked_by_airflow():
    from airflow.sdk._shared.secrets_masker import redact, should_hide_value_for_key

    assert should_hide_value_for_key(CONNECTION_SECRET_EXTRA)
    assert connection_auth_secret(_conn(**{CONNECTION_SECRET_EXTRA: SECRET})) == SECRET  # reads extra_dejson
    assert SECRET not in redact(f"a log line with {SECRET} in it")


@pytest.mark.parametrize("value", [" padded", "two\nlines", 42])
def test_a_malformed_secret_is_refused(value):
    with pytest.raises(ValueError, match="'spark.authenticate.secret' extra must be a string"):
        connection_auth_secret(_conn(**{CONNECTION_SECRET_EXTRA: value}))


def test_no_secret_leaves_the_arguments_alone(tmp_path):
    assert auth_submit_kwargs(_conn(), tmp_path, {"executor_memory": "1g"}) == ({"executor_memory": "1g"}, False)
    assert auth_submit_kwargs(None, tmp_path, {}) == ({}, False)
    assert not (tmp_path / AUTH_PROPERTIES_FILE).exists()


def test_the_properties_file_is_owner_only_and_reads_back_the_secret(tmp_path):
    user = tmp_path / "user.properties"
    user.write_text("spark.executor.cores 2\n")
    kwargs, load_defaults = auth_submit_kwargs(
        _conn(**{CONNECTION_SECRET_EXTRA: SECRET}), tmp_path, {"properties_file": str(user)}
    )
    path = tmp_path / AUTH_PROPERTIES_FILE
    assert kwargs == {"properties_file": str(path)} and load_defaults is False  # a user's file hid the defaults
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    lines = path.read_text().splitlines()
    assert lines[0] == "spark.executor.cores 2" and "spark.authenticate=true" in lines
    # java.util.Properties reads "\\" back as one backslash; ":", "=" and "#" in a value are literal
    assert "spark.authenticate.secret=unit-secret-\\\\with=backslash:and#more" in lines
    path.unlink()
    _, load_defaults = auth_submit_kwargs(_conn(**{CONNECTION_SECRET_EXTRA: SECRET}), tmp_path, {})
    assert load_defaults is True


def test_the_command_line_names_the_file_and_loads_the_defaults(tmp_path, monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_AUTH_UNIT", _conn(**{CONNECTION_SECRET_EXTRA: SECRET}).as_json())
    kwargs, load_defaults = auth_submit_kwargs(_conn(**{CONNECTION_SECRET_EXTRA: SECRET}), tmp_path, {})
    hook = _SparkSubmit(
        local_master=None,
        on_line=lambda line: None,
        load_spark_defaults=load_defaults,
        conn_id="spark_auth_unit",
        conf={"spark.authenticate": "true"},
        **kwargs,
    )
    command = hook._build_spark_submit_command("app.py")
    at = command.index("--properties-file")
    assert command[at + 1 : at + 3] == [str(tmp_path / AUTH_PROPERTIES_FILE), "--load-spark-defaults"]
    assert not any(SECRET in arg for arg in command)
