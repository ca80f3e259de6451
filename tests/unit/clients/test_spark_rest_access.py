"""
The Spark REST clients against a secured server: the bearer token on every request, HTTP 401/403 and an unverifiable
certificate final (one attempt, never retried, a ``create`` never resent), the token in no message or repr.
(Against a real JWSFilter and a real self-signed certificate: tests/integration/test_secured_master.py.)
"""

from __future__ import annotations

import asyncio
import ssl

import httpx
import pytest

from airflow_provider_horovod.clients import (
    AsyncSparkRestClient,
    RetryPolicy,
    SparkRestAccess,
    SparkRestAuthError,
    SparkRestClient,
    SparkRestTLSError,
    SparkRestUnavailableError,
)
from airflow_provider_horovod.clients.spark_rest_calls import Call, is_retryable
from tests.unit.clients.test_spark_rest import MASTER, REST, UI, Script

TOKEN = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ0ZXN0In0.c2lnbmF0dXJl"
ACCESS = SparkRestAccess(token=TOKEN, origin="Airflow connection 'spark_secure'")
POLICY = RetryPolicy(max_attempts=5, initial_backoff_s=0.01, max_backoff_s=0.02)


def client(script: Script, access: SparkRestAccess | None = ACCESS) -> SparkRestClient:
    return SparkRestClient(
        ui_url=UI,
        master_ui_url=MASTER,
        rest_url=REST,
        retry=POLICY,
        transport=httpx.MockTransport(script),
        access=access,
    )


@pytest.mark.parametrize("status", [401, 403])
def test_a_refused_token_is_final_and_named_without_the_token(status):
    script = Script(httpx.Response(status, text="<html>HTTP ERROR 403 Forbidden</html>"))
    with client(script) as spark, pytest.raises(SparkRestAuthError) as raised:
        spark.driver_status("driver-1")
    assert len(script.requests) == 1  # idempotent GET, 5 attempts allowed: still one
    assert script.requests[0].headers["Authorization"] == f"Bearer {TOKEN}"
    err = raised.value
    assert err.status_code == status and f"HTTP {status}" in str(err)
    assert "Airflow connection 'spark_secure'" in str(err) and "carried a bearer token" in str(err)
    assert TOKEN not in str(err) and TOKEN not in repr(err)
    assert not is_retryable(Call("GET", REST, lambda d: d), err)


def test_a_refused_create_is_sent_once_and_no_token_is_said_so():
    script = Script(httpx.Response(403))
    with client(script, SparkRestAccess()) as spark, pytest.raises(SparkRestAuthError, match="carried no bearer"):
        spark.create_submission(app_resource="file:/a.py", main_class="M", client_spark_version="4.2.0")
    assert len(script.requests) == 1 and "Authorization" not in script.requests[0].headers


def test_every_call_of_the_async_client_carries_the_token_and_a_403_is_final():
    script = Script(
        httpx.Response(
            200,
            json={
                "action": "SubmissionStatusResponse",
                "success": True,
                "submissionId": "driver-1",
                "driverState": "RUNNING",
            },
        ),
        httpx.Response(403),
    )

    async def main():
        async with AsyncSparkRestClient(
            rest_url=REST, retry=POLICY, access=ACCESS, transport=httpx.MockTransport(script)
        ) as spark:
            first = await spark.driver_status("driver-1")
            with pytest.raises(SparkRestAuthError):
                await spark.kill_submission("driver-1")
            return first

    assert asyncio.run(main()).driver_state == "RUNNING"
    assert [r.headers["Authorization"] for r in script.requests] == [f"Bearer {TOKEN}"] * 2


def test_an_unverifiable_certificate_is_final_and_says_what_to_give():
    cause = ssl.SSLCertVerificationError(1, "certificate verify failed: self-signed certificate")
    cause.verify_message = "self-signed certificate"
    failure = httpx.ConnectError("[SSL: CERTIFICATE_VERIFY_FAILED]")
    failure.__cause__ = cause
    script = Script(failure)
    with client(script) as spark, pytest.raises(SparkRestTLSError) as raised:
        spark.master_state()
    assert len(script.requests) == 1
    assert "self-signed certificate" in str(raised.value) and "CA bundle" in str(raised.value)
    assert "Airflow connection 'spark_secure'" in str(raised.value)
    # a plain connection failure stays retryable
    script = Script(httpx.ConnectError("refused"))
    with client(script) as spark, pytest.raises(SparkRestUnavailableError):
        spark.master_state()
    assert len(script.requests) == 5


def test_the_access_settings_show_no_token_and_a_bad_ca_bundle_is_named(tmp_path):
    assert TOKEN not in repr(ACCESS) and TOKEN not in repr(client(Script(httpx.Response(200))))
    bad = tmp_path / "ca.pem"
    bad.write_text("not a certificate")
    with pytest.raises(SparkRestTLSError, match="cannot load the CA bundle .*ca.pem.* of Airflow connection 'x'"):
        SparkRestClient(rest_url=REST, access=SparkRestAccess(ca_bundle=str(bad), origin="Airflow connection 'x'"))
