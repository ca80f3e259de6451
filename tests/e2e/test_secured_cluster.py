"""
A secured Spark standalone master (docs/security.md): its REST submission server (``spark.master.rest.filters``) and
web UI (``spark.ui.filters``) run ``org.apache.spark.ui.JWSFilter`` with a key made here, and its web UI serves HTTPS
(``spark.ssl.standalone.*``) with a self-signed certificate made with the JDK's keytool. One cluster for the module.

* the master really refuses a request without the token, or with one signed with another key (HTTP 403), and the UI
  really refuses a client that does not trust the certificate, so nothing here can pass on an open master;
* a wrong or missing token fails the hook at once, naming the connection and the 403, with nothing staged or
  submitted; the trigger, rebuilt from its serialized form, reads the token from the connection;
* through real Airflow (``airflow dags test``): the Spark provider's ``@task.pyspark`` on the connection logs no
  ``Ignoring non-Spark config property`` with the new extras layout (it does with the old), and a deferrable
  cluster-mode task trains there with the token in the connection's password, which shows in no log line or XCom.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import secrets
import shutil
import ssl
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from airflow_provider_horovod.clients import SparkRestClient, SparkRestTLSError
from airflow_provider_horovod.exceptions import HorovodAccessError
from airflow_provider_horovod.hooks.standalone import HorovodStandaloneHook
from airflow_provider_horovod.triggers.horovod import HorovodSparkJobTrigger
from airflow_provider_horovod.utils.spark_connection import PREFIX, rest_access
from tests.e2e.test_dags import HERE, run_dag
from tests.standalone import HOST, free_port, standalone_cluster

pytestmark = [pytest.mark.e2e, pytest.mark.spark, pytest.mark.timeout(600)]

JWS_FILTER = "org.apache.spark.ui.JWSFilter"
STORE_PASSWORD = "test-keystore-password"


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def mint_jws(key: bytes, subject: str = "airflow") -> str:
    """An HS256 JWS (``header.payload.signature``), what a cluster's administrator signs with the filter's key."""
    header = b64url(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    payload = b64url(json.dumps({"sub": subject}).encode())
    signature = hmac.new(key, f"{header}.{payload}".encode(), hashlib.sha256).digest()
    return f"{header}.{payload}.{b64url(signature)}"


def self_signed(folder: Path) -> tuple[Path, Path]:
    """A PKCS12 keystore with a self-signed certificate for 127.0.0.1, and that certificate as a PEM CA bundle."""
    store, pem = folder / "master.p12", folder / "ca.pem"
    keytool = shutil.which("keytool") or pytest.skip("the JDK's keytool is not on PATH")
    subprocess.run([keytool, "-genkeypair", "-alias", "master", "-keyalg", "RSA", "-keysize", "2048", "-validity",
                    "2", "-dname", f"CN={HOST}", "-ext", f"SAN=ip:{HOST}", "-keystore", str(store), "-storetype",
                    "PKCS12", "-storepass", STORE_PASSWORD, "-keypass", STORE_PASSWORD],
                   check=True, capture_output=True, timeout=60)
    subprocess.run([keytool, "-exportcert", "-rfc", "-alias", "master", "-keystore", str(store), "-storepass",
                    STORE_PASSWORD, "-file", str(pem)], check=True, capture_output=True, timeout=60)
    return store, pem


class Secured:
    """The module's cluster, its key, a valid and a wrong token, the CA bundle."""

    def __init__(self, cluster, key: bytes, ca: Path, ui_port: int) -> None:
        self.cluster, self.ca, self.ui_port = cluster, ca, ui_port
        self.token = mint_jws(key)
        self.wrong_token = mint_jws(secrets.token_bytes(32))

    def connection(self, password: str | None, *, old_layout: bool = False) -> str:
        """The cluster as a ``spark`` connection (``AIRFLOW_CONN_*`` JSON): no deploy-mode, the token as password."""
        rest_port = int(self.cluster.rest_url.rsplit(":", 1)[1])
        if old_layout:
            extra = {"rest-port": rest_port, "ui-port": self.ui_port, "ui-scheme": "https",
                     PREFIX + "caBundle": str(self.ca)}
        else:
            extra = {PREFIX + "restPort": rest_port, PREFIX + "uiPort": self.ui_port, PREFIX + "uiScheme": "https",
                     PREFIX + "caBundle": str(self.ca)}
        return json.dumps({"conn_type": "spark", "host": f"spark://{HOST}",
                           "port": int(self.cluster.master_url.rsplit(":", 1)[1]), "password": password,
                           "extra": extra})


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    work = tmp_path_factory.mktemp("secured")
    store, ca = self_signed(work)
    key, ui_port = secrets.token_bytes(32), free_port()
    master_conf = {
        "spark.master.rest.filters": JWS_FILTER, "spark.ui.filters": JWS_FILTER,
        f"spark.{JWS_FILTER}.param.secretKey": b64url(key),
        "spark.ssl.standalone.enabled": "true", "spark.ssl.standalone.port": str(ui_port),
        "spark.ssl.standalone.keyStore": str(store), "spark.ssl.standalone.keyStoreType": "PKCS12",
        "spark.ssl.standalone.keyStorePassword": STORE_PASSWORD, "spark.ssl.standalone.keyPassword": STORE_PASSWORD,
    }
    token = mint_jws(key)
    with standalone_cluster(workers=1, cores_per_worker=3, memory_per_worker="2g", work_dir=work / "spark",
                            master_conf=master_conf, web_ui_url=f"https://{HOST}:{ui_port}",
                            http={"headers": {"Authorization": f"Bearer {token}"},
                                  "verify": ssl.create_default_context(cafile=str(ca))}) as cluster:
        yield Secured(cluster, key, ca, ui_port)


def test_the_master_refuses_a_missing_or_wrong_token_and_an_untrusted_client(secured):
    rest, ui = secured.cluster.rest_url, secured.cluster.web_ui_url
    probe = f"{rest}/v1/submissions/status/driver-none"
    assert httpx.get(probe, timeout=10).status_code == 403
    assert httpx.get(probe, timeout=10, headers={"Authorization": f"Bearer {secured.wrong_token}"}).status_code == 403
    assert httpx.get(probe, timeout=10, headers={"Authorization": f"Bearer {secured.token}"}).status_code == 200
    # the REST server speaks plain HTTP even with spark.ssl.standalone.enabled: its Jetty connector has no TLS
    assert ui.startswith("https://") and rest.startswith("http://")
    trusted = ssl.create_default_context(cafile=str(secured.ca))
    assert httpx.get(f"{ui}/json/", timeout=10, verify=trusted).status_code == 403  # the UI's JWSFilter
    with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
        httpx.get(f"{ui}/json/", timeout=10)
    # the provider's client: verified with the connection's CA bundle, a clear error without it
    conn = _conn(secured.connection(secured.token))
    with SparkRestClient(master_ui_url=ui, access=rest_access(conn)) as client:
        assert client.master_state().status == "ALIVE"
    without_ca = rest_access(_conn(secured.connection(secured.token).replace(str(secured.ca), "")))
    with SparkRestClient(master_ui_url=ui, access=without_ca) as client, pytest.raises(SparkRestTLSError) as raised:
        client.master_state()
    assert "self-signed certificate" in str(raised.value) and "Airflow connection 'spark_secure'" in str(raised.value)


def _conn(uri_json: str):
    from airflow.models import Connection

    data = json.loads(uri_json)
    return Connection(conn_id="spark_secure", conn_type=data["conn_type"], host=data["host"], port=data["port"],
                      password=data["password"], extra=json.dumps({k: v for k, v in data["extra"].items() if v}))


@pytest.mark.parametrize("token", ["wrong", None])
def test_a_wrong_or_missing_token_fails_at_once_with_nothing_submitted(secured, token, tmp_path, monkeypatch):
    password = secured.wrong_token if token == "wrong" else None
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_SECURE", secured.connection(password))
    hook = HorovodStandaloneHook(conn_id="spark_secure", np=2, name="refused")
    started = time.monotonic()
    with pytest.raises(HorovodAccessError) as raised:
        hook.submit(staging=tmp_path / "staging", payload=b"never sent", key=b"k" * 32,
                    artifact_dir=str(tmp_path / "art"))
    assert time.monotonic() - started < 15  # no retries
    message = str(raised.value)
    assert "connection 'spark_secure'" in message and "HTTP 403" in message and "nothing was submitted" in message
    assert secured.token not in message and secured.wrong_token not in message
    assert not (tmp_path / "staging").exists()  # nothing staged
    state = secured.cluster.master_json()
    assert not state["activedrivers"] and not state["completeddrivers"]


def test_the_trigger_rebuilt_from_its_serialized_form_reads_the_token_from_the_connection(secured, monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_SECURE", secured.connection(secured.token))
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_WRONG", secured.connection(secured.wrong_token))

    def first_event(conn_id: str) -> dict:
        trigger = HorovodSparkJobTrigger(submission_id="driver-none", rest_url=secured.cluster.rest_url,
                                         staging="/nonexistent", poll_interval_s=0.1, conn_id=conn_id)
        path, kwargs = trigger.serialize()
        assert secured.token not in json.dumps(kwargs) and secured.wrong_token not in json.dumps(kwargs)
        events = HorovodSparkJobTrigger(**kwargs).run()

        async def first() -> dict:
            try:
                return (await asyncio.wait_for(events.__anext__(), timeout=60)).payload
            finally:
                await events.aclose()

        return asyncio.run(first())

    let_in = first_event("spark_secure")  # past the filter: the master itself says it has no such driver
    assert let_in["status"] == "failed" and "does not know submission 'driver-none'" in let_in["message"]
    refused = first_event("spark_wrong")
    assert "HTTP 403" in refused["message"] and "Airflow connection 'spark_wrong'" in refused["message"]


def test_pyspark_and_a_deferred_cluster_task_share_the_secured_connection(secured, airflow_home, tmp_path):
    dags = tmp_path / "dags"
    dags.mkdir()
    shutil.copy(HERE / "dags" / "horovod_secured.py", dags)
    env = {"AIRFLOW_CONN_SPARK_SECURE": secured.connection(secured.token),
           "AIRFLOW_CONN_SPARK_SECURE_OLD": secured.connection(secured.token, old_layout=True),
           "AIRFLOW__HOROVOD__ARTIFACT_ROOT": str(tmp_path / "artifacts")}
    log, run = run_dag(airflow_home, dags, "horovod_secured", extra_env=env)
    assert run["states"] == {"pyspark": "success", "deferred": "success"}, log[-6000:]
    xcom = run["xcom"]
    assert xcom["pyspark.return_value"] == secured.cluster.master_url
    assert xcom["deferred.return_value"] == {"size": 2, "total": 3.0}
    assert xcom["deferred.spark_submission_id"].startswith("driver-")
    assert "deferred" in log.lower() and "is FINISHED" in log
    assert "np=2 fits" in log and "Cannot read the Spark master's state" not in log  # /json/ over HTTPS, with the token
    assert "Ignoring non-Spark config property" not in log  # the new layout: spark-submit carries it silently
    assert secured.token not in log and secured.token not in json.dumps(xcom, default=str)
    state = secured.cluster.master_json()
    assert not state["activedrivers"] and not state["activeapps"]

    old_log, old_run = run_dag(airflow_home, dags, "pyspark_old_layout", extra_env=env)
    assert old_run["states"] == {"pyspark": "success"}, old_log[-4000:]
    assert "Ignoring non-Spark config property: ui-port" in old_log  # what the new layout avoids
