"""The one reader of this provider's extras on a ``spark`` connection: the new layout, the old one (deprecated)."""

from __future__ import annotations

import json
import warnings

import pytest
from airflow.exceptions import AirflowProviderDeprecationWarning
from airflow.models import Connection

from airflow_provider_horovod.utils.spark_connection import (
    PREFIX,
    SparkConnectionExtras,
    connection_extras,
    rest_access,
)

NEW = {
    PREFIX + "restPort": 7066,
    PREFIX + "restScheme": "https",
    PREFIX + "uiPort": "8480",
    PREFIX + "uiScheme": "https",
    PREFIX + "historyServerUrl": "http://hs:18080/",
    PREFIX + "caBundle": "/ca.pem",
    PREFIX + "deployMode": "cluster",
}
OLD = {
    "rest-port": 7066,
    "rest-scheme": "https",
    "ui-port": "8480",
    "ui-scheme": "https",
    "history-server-url": "http://hs:18080/",
}


def conn(extra: dict, password: str | None = None) -> Connection:
    return Connection(
        conn_id="spark_x", conn_type="spark", host="spark://m", port=7077, password=password, extra=json.dumps(extra)
    )


def test_the_new_layout_is_read_without_a_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        extras = connection_extras(conn({**NEW, "deploy-mode": "client", "queue": "q"}))
    assert extras == SparkConnectionExtras(
        rest_port=7066,
        rest_scheme="https",
        ui_port=8480,
        ui_scheme="https",
        history_server_url="http://hs:18080",
        ca_bundle="/ca.pem",
        deploy_mode="cluster",
    )
    assert connection_extras(conn({})) == SparkConnectionExtras()  # the defaults: 6066, 8080, http
    assert all(key.startswith("spark.") for key in NEW)  # what spark-submit carries without a word


def test_the_old_layout_is_read_with_a_warning_naming_the_new_key():
    with pytest.warns(AirflowProviderDeprecationWarning) as caught:
        extras = connection_extras(conn(OLD))
    assert (extras.rest_port, extras.rest_scheme, extras.ui_port, extras.ui_scheme, extras.history_server_url) == (
        7066,
        "https",
        8480,
        "https",
        "http://hs:18080",
    )
    messages = sorted(str(w.message) for w in caught)
    assert len(messages) == 5
    assert any("'rest-port' is deprecated, use 'spark.airflowProviderHorovod.restPort'" in m for m in messages)
    assert all("connection 'spark_x'" in m for m in messages)
    with warnings.catch_warnings():  # the new key wins, and then the old one is not even looked at
        warnings.simplefilter("error")
        assert (
            connection_extras(
                conn(
                    {
                        **OLD,
                        PREFIX + "restPort": 1234,
                        PREFIX + "restScheme": "http",
                        PREFIX + "uiPort": 1,
                        PREFIX + "uiScheme": "http",
                        PREFIX + "historyServerUrl": "http://new",
                    }
                )
            ).rest_port
            == 1234
        )


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            {PREFIX + "restPort": "abc"},
            r"connection 'spark_x': spark.airflowProviderHorovod.restPort must be a TCP port",
        ),
        ({PREFIX + "uiPort": 0}, r"spark.airflowProviderHorovod.uiPort must be a TCP port \(1-65535\), got 0"),
        ({PREFIX + "uiScheme": "ftp"}, r"uiScheme must be one of \('http', 'https'\), got 'ftp'"),
    ],
)
def test_a_bad_extra_is_named(extra, message):
    with pytest.raises(ValueError, match=message):
        connection_extras(conn(extra))


def test_the_password_is_the_bearer_token_and_never_shown():
    token = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ4In0.abc_-def"
    access = rest_access(conn({PREFIX + "caBundle": "/ca.pem"}, password=f" {token}\n"))
    assert (access.token, access.ca_bundle, access.origin) == (token, "/ca.pem", "Airflow connection 'spark_x'")
    assert token not in repr(access)
    assert rest_access(conn({}, password="")).token is None
    with pytest.raises(ValueError, match="password is the bearer token .* must be a JWS") as raised:
        rest_access(conn({}, password="hunter2-not-a-jws"))
    assert "hunter2" not in str(raised.value)


def test_client_mode_leaves_a_password_that_is_not_a_jws_unsent_with_a_warning():
    # client mode's spark-submit never uses the password; only /json/ and the monitoring API would get the token
    with pytest.warns(UserWarning, match="must be a JWS .*it is not sent") as caught:
        access = rest_access(conn({}, password="hunter2-not-a-jws"), require_token_shape=False)
    assert access.token is None and "hunter2" not in str(caught[0].message)
