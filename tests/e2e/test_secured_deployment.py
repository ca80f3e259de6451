"""
Secured Spark clusters (issue #27, docs/security.md) under one real Airflow deployment (api-server, scheduler,
dag-processor, triggerer; LocalExecutor) shared by the module, with two standalone clusters of 1 worker x 3 cores
(127.0.0.1) as module fixtures:

``auth``: ``spark.authenticate`` with a shared secret, RPC encryption (``spark.network.crypto.enabled``) and I/O
encryption (``spark.io.encryption.enabled``) in the cluster's own ``spark-defaults.conf``; no REST submission server
(the master refuses to start one with the secret set, SPARK-25088). The Airflow side's Spark (``SPARK_CONF_DIR``)
has no secret: it is only in the connection's ``spark.authenticate.secret`` extra.

* an application without the secret is refused by the master (so nothing here can pass on an open cluster);
* the operator trains np=2 in client mode and in cluster mode (spark-submit's legacy gateway, deferred: the
  triggerer polls the master's ``/json/``); the secret (and the payload's HMAC key) is on no process command line
  sampled during the runs (spark-submit as the Spark provider's hook builds it, the driver, executors, ranks), not in
  the task logs, XComs or rendered template fields read through the API, not in the driver's or executors' output,
  and redacted in the Spark event logs the operator's ``conf`` turns on;
* a deferred cluster-mode task marked failed through the API kills its driver from the triggerer (the master UI's
  kill link); the hook without the secret says which extra is missing, with a wrong one that nothing was submitted.

``secured``: the REST submission server (``spark.master.rest.filters``) and the web UI (``spark.ui.filters``) run
``org.apache.spark.ui.JWSFilter`` with a key made here, and the web UI serves HTTPS (``spark.ssl.standalone.*``) with a
self-signed certificate made with the JDK's keytool.

* the master refuses a request without the token, or with one signed with another key (HTTP 403), and the UI refuses
  a client that does not trust the certificate;
* a wrong or missing token fails the hook at once, naming the connection and the 403, with nothing staged or
  submitted; the trigger, rebuilt from its serialized form, reads the token from the connection;
* the Spark provider's ``@task.pyspark`` on the connection logs no ``Ignoring non-Spark config property`` with the
  new extras layout (it does with the old), and a deferrable cluster-mode task trains there with the token in the
  connection's password (the triggerer polls with it), which shows in no log, XCom or rendered field;
* with a wrong token the deferrable task fails at once with the 403 named: one try, no retry (``retries=1``),
  nothing submitted.

About 12 minutes on a 2-core machine shared with other test runs (two clusters, one deployment of about 1.5 min,
four trainings of 1 to 2.5 min each, one refused JVM).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import hmac
import json
import os
import secrets
import shutil
import ssl
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil
import pytest

from airflow_provider_horovod.clients import SparkRestClient, SparkRestTLSError
from airflow_provider_horovod.exceptions import HorovodAccessError, HorovodJobError
from airflow_provider_horovod.job import TrainingJob
from airflow_provider_horovod.runtime.driver.program import KEY_ENV
from airflow_provider_horovod.runtime.settings import JobSettings
from airflow_provider_horovod.standalone.hook import HorovodStandaloneHook
from airflow_provider_horovod.triggers.horovod import HorovodSparkJobTrigger
from airflow_provider_horovod.utils.spark_auth import CONNECTION_SECRET_EXTRA
from airflow_provider_horovod.utils.spark_connection import PREFIX, rest_access
from tests.airflow_deployment import DeploymentError, _poll, airflow_deployment, copy_dags
from tests.command_lines import CommandLines
from tests.integration.shared_cluster_jobs import job_conf, payload_file, wait_until
from tests.standalone import HOST, free_port, spark_home, standalone_cluster

pytestmark = [pytest.mark.e2e, pytest.mark.spark, pytest.mark.timeout(900)]

HERE = Path(__file__).resolve().parent
JWS_FILTER = "org.apache.spark.ui.JWSFilter"
STORE_PASSWORD = "test-keystore-password"
SECRET = "rpc-" + secrets.token_hex(16)
"""The ``auth`` cluster's RPC secret."""
ENCRYPTION = {"spark.network.crypto.enabled": "true", "spark.io.encryption.enabled": "true"}
REFUSED = "Expected SaslMessage, received something else"
"""What the master logs when a client without the secret talks to it (Spark 4.2)."""
REDACTED = "*********(redacted)"


# --- the clusters ------------------------------------------------------------------------------------------------


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
    subprocess.run(
        [
            keytool,
            "-genkeypair",
            "-alias",
            "master",
            "-keyalg",
            "RSA",
            "-keysize",
            "2048",
            "-validity",
            "2",
            "-dname",
            f"CN={HOST}",
            "-ext",
            f"SAN=ip:{HOST}",
            "-keystore",
            str(store),
            "-storetype",
            "PKCS12",
            "-storepass",
            STORE_PASSWORD,
            "-keypass",
            STORE_PASSWORD,
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    subprocess.run(
        [
            keytool,
            "-exportcert",
            "-rfc",
            "-alias",
            "master",
            "-keystore",
            str(store),
            "-storepass",
            STORE_PASSWORD,
            "-file",
            str(pem),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return store, pem


class Secured:
    """The JWS/HTTPS cluster, its key, a valid and a wrong token, the CA bundle."""

    def __init__(self, cluster, key: bytes, ca: Path, ui_port: int) -> None:
        self.cluster, self.ca, self.ui_port = cluster, ca, ui_port
        self.token = mint_jws(key)
        self.wrong_token = mint_jws(secrets.token_bytes(32))

    def connection(self, password: str | None, *, old_layout: bool = False) -> str:
        """The cluster as a ``spark`` connection (``AIRFLOW_CONN_*`` JSON): no deploy-mode, the token as password."""
        rest_port = int(self.cluster.rest_url.rsplit(":", 1)[1])
        if old_layout:
            extra = {
                "rest-port": rest_port,
                "ui-port": self.ui_port,
                "ui-scheme": "https",
                PREFIX + "caBundle": str(self.ca),
            }
        else:
            extra = {
                PREFIX + "restPort": rest_port,
                PREFIX + "uiPort": self.ui_port,
                PREFIX + "uiScheme": "https",
                PREFIX + "caBundle": str(self.ca),
            }
        return json.dumps(
            {
                "conn_type": "spark",
                "host": f"spark://{HOST}",
                "port": int(self.cluster.master_url.rsplit(":", 1)[1]),
                "password": password,
                "extra": extra,
            }
        )


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    work = tmp_path_factory.mktemp("secured")
    store, ca = self_signed(work)
    key, ui_port = _master_opts_safe_key(), free_port()
    master_conf = {
        "spark.master.rest.filters": JWS_FILTER,
        "spark.ui.filters": JWS_FILTER,
        f"spark.{JWS_FILTER}.param.secretKey": b64url(key),
        "spark.ssl.standalone.enabled": "true",
        "spark.ssl.standalone.port": str(ui_port),
        "spark.ssl.standalone.keyStore": str(store),
        "spark.ssl.standalone.keyStoreType": "PKCS12",
        "spark.ssl.standalone.keyStorePassword": STORE_PASSWORD,
        "spark.ssl.standalone.keyPassword": STORE_PASSWORD,
    }
    token = mint_jws(key)
    with standalone_cluster(
        workers=1,
        cores_per_worker=3,
        memory_per_worker="2g",
        work_dir=work / "spark",
        master_conf=master_conf,
        web_ui_url=f"https://{HOST}:{ui_port}",
        http={"headers": {"Authorization": f"Bearer {token}"}, "verify": ssl.create_default_context(cafile=str(ca))},
    ) as cluster:
        yield Secured(cluster, key, ca, ui_port)


def _master_opts_safe_key() -> bytes:
    """
    A random 32-byte JWS key whose base64url has no ``Xmx`` in it: the key reaches the master as a ``-D`` option in
    ``SPARK_MASTER_OPTS``, and Spark's launcher (``SparkClassCommandBuilder``) refuses to start a master whose
    ``SPARK_MASTER_OPTS`` contain ``Xmx`` anywhere ("is not allowed to specify max heap(Xmx) memory settings"), which
    a random key's text does about once in 6,000 draws (seen in a clean-clone run).
    """
    while "Xmx" in b64url(key := secrets.token_bytes(32)):
        pass
    return key


def auth_connection(cluster, secret: str | None = SECRET) -> str:
    """The ``auth`` cluster as a ``spark`` connection with the RPC secret in its extra (none for ``None``)."""
    conn = json.loads(cluster.airflow_connection(deploy_mode="client"))
    if secret is not None:
        conn["extra"][CONNECTION_SECRET_EXTRA] = secret
    return json.dumps(conn)


@pytest.fixture(scope="module")
def auth(tmp_path_factory):
    work = tmp_path_factory.mktemp("auth")
    (work / "conf").mkdir()
    defaults = {"spark.authenticate": "true", "spark.authenticate.secret": SECRET, **ENCRYPTION}
    (work / "conf" / "spark-defaults.conf").write_text("".join(f"{k} {v}\n" for k, v in defaults.items()))
    # 3 cores, 2 GiB (accounting only): cluster deploy mode's driver takes a core beside np=2's executors
    with standalone_cluster(workers=1, cores_per_worker=3, memory_per_worker="2g", work_dir=work, rest=False) as c:
        yield c


@pytest.fixture(scope="module")
def airflow_spark_conf(tmp_path_factory) -> Path:
    """This machine's ``SPARK_CONF_DIR``: empty, no secret, no defaults."""
    return tmp_path_factory.mktemp("airflow-spark-conf")


@pytest.fixture(scope="module")
def event_logs(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("events")


@pytest.fixture(scope="module")
def airflow(auth, secured, airflow_spark_conf, event_logs, tmp_path_factory):
    dags = copy_dags(tmp_path_factory.mktemp("dags"), HERE / "dags" / "horovod_secured.py")
    env = {
        "AIRFLOW_CONN_SPARK_AUTH": auth_connection(auth),
        "AIRFLOW_CONN_SPARK_SECURE": secured.connection(secured.token),
        "AIRFLOW_CONN_SPARK_SECURE_OLD": secured.connection(secured.token, old_layout=True),
        "AIRFLOW_CONN_SPARK_SECURE_WRONG": secured.connection(secured.wrong_token),
        "AIRFLOW_VAR_SECURED_EVENT_LOG_DIR": event_logs.as_uri(),
        "AIRFLOW__HOROVOD__ARTIFACT_ROOT": str(tmp_path_factory.mktemp("artifacts")),  # the "shared filesystem"
        "SPARK_CONF_DIR": str(airflow_spark_conf),
    }
    with airflow_deployment(dags, extra_env=env) as deployment:
        yield deployment


# --- helpers -----------------------------------------------------------------------------------------------------


def _log(airflow, dag_id: str, run_id: str, task_id: str, try_number: int = 1) -> str:
    """The try's log so far ("" before the try has started writing one)."""
    try:
        return airflow.task_log(dag_id, run_id, task_id, try_number=try_number)
    except DeploymentError:
        return ""


def _drivers(cluster) -> dict[str, str]:
    state = cluster.master_json()
    return {d["id"]: d["state"] for d in state.get("activedrivers", []) + state.get("completeddrivers", [])}


def _event_log_properties(path: Path) -> dict[str, str]:
    env = next(json.loads(e) for e in path.read_text().splitlines() if '"SparkListenerEnvironmentUpdate"' in e)
    return dict(env["Spark Properties"])


def _out_of_sight(airflow, dag_id: str, run_id: str, task_id: str, *needles: str) -> dict:
    """
    Assert no needle is in the task's log, any of its XComs or its rendered template fields (all read through the
    deployment's API); return the XComs.
    """
    log = airflow.task_log(dag_id, run_id, task_id)
    xcoms = airflow.xcoms(dag_id, run_id, task_id)
    rendered = airflow.task_instance(dag_id, run_id, task_id)["rendered_fields"]
    assert log and xcoms and rendered is not None, (log[-2000:], xcoms, rendered)
    for needle in needles:
        assert needle not in log, f"{task_id}: in the task log"
        assert needle not in json.dumps(xcoms, default=str), f"{task_id}: in an XCom"
        assert needle not in json.dumps(rendered, default=str), f"{task_id}: in the rendered fields"
    return xcoms


# --- the JWS/HTTPS master, without Airflow ---------------------------------------------------------------------------


def _conn(uri_json: str):
    from airflow.models import Connection

    data = json.loads(uri_json)
    return Connection(
        conn_id="spark_secure",
        conn_type=data["conn_type"],
        host=data["host"],
        port=data["port"],
        password=data["password"],
        extra=json.dumps({k: v for k, v in data["extra"].items() if v}),
    )


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


@pytest.mark.parametrize("token", ["wrong", None])
def test_a_wrong_or_missing_token_fails_the_hook_at_once_with_nothing_submitted(secured, token, tmp_path, monkeypatch):
    password = secured.wrong_token if token == "wrong" else None
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_SECURE", secured.connection(password))
    hook = HorovodStandaloneHook(conn_id="spark_secure")
    started = time.monotonic()
    with pytest.raises(HorovodAccessError) as raised:
        hook.submit(
            TrainingJob(
                key=b"k" * 32,
                payload=b"never sent",
                settings=JobSettings(np=2),
                artifact_dir=str(tmp_path / "art"),
                app_name="refused",
            ),
            staging=tmp_path / "staging",
        )
    assert time.monotonic() - started < 15  # no retries
    message = str(raised.value)
    assert "connection 'spark_secure'" in message and "HTTP 403" in message and "nothing was submitted" in message
    assert secured.token not in message and secured.wrong_token not in message
    assert not (tmp_path / "staging").exists()  # nothing staged
    assert _drivers(secured.cluster) == {}


def test_the_trigger_rebuilt_from_its_serialized_form_reads_the_token_from_the_connection(secured, monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_SECURE", secured.connection(secured.token))
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_WRONG", secured.connection(secured.wrong_token))

    def first_event(conn_id: str) -> dict:
        trigger = HorovodSparkJobTrigger(
            submission_id="driver-none",
            rest_url=secured.cluster.rest_url,
            staging="/nonexistent",
            poll_interval_s=0.1,
            conn_id=conn_id,
        )
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


# --- the authenticated cluster, without Airflow --------------------------------------------------------------------


def test_an_application_without_the_secret_is_refused(auth, airflow_spark_conf, tmp_path):
    # a plain application (Spark itself refuses encryption without spark.authenticate, before any connection)
    app = tmp_path / "app.py"
    app.write_text("from pyspark.sql import SparkSession\nSparkSession.builder.getOrCreate().stop()\n")
    master_log = auth.log_dir / "master.log"
    seen = master_log.read_text(errors="replace").count(REFUSED)
    env = {
        **os.environ,
        "PYSPARK_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_CONF_DIR": str(airflow_spark_conf),
    }
    out = tmp_path / "spark-submit.out"
    proc = subprocess.Popen(
        [
            str(spark_home() / "bin" / "spark-submit"),
            "--master",
            auth.master_url,
            "--conf",
            "spark.driver.memory=512m",
            str(app),
        ],
        env=env,
        stdout=out.open("wb"),
        stderr=subprocess.STDOUT,
    )
    try:  # Spark retries the registration for a minute: the master's refusal is what the test waits for
        wait_until(
            lambda: master_log.read_text(errors="replace").count(REFUSED) > seen,
            "the master to refuse the application",
            timeout_s=120,
            context=lambda: out.read_text(errors="replace")[-3000:] + auth.log_tail(20),
        )
        assert proc.poll() is None or proc.returncode != 0, out.read_text(errors="replace")[-3000:]
        assert auth.master_json()["activeapps"] == [] and auth.master_json()["completedapps"] == []
    finally:
        with contextlib.suppress(psutil.NoSuchProcess):
            for child in psutil.Process(proc.pid).children(recursive=True):
                child.kill()
        proc.kill()
        proc.wait(timeout=30)


def test_cluster_mode_without_the_right_secret_fails_the_hook_saying_why(
    auth, airflow_spark_conf, tmp_path, monkeypatch
):
    monkeypatch.setenv("SPARK_CONF_DIR", str(airflow_spark_conf))
    wrong = "rpc-wrong-" + secrets.token_hex(8)
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_AUTH_NONE", auth_connection(auth, None))
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_AUTH_WRONG", auth_connection(auth, wrong))
    path, key = payload_file(tmp_path / "staging", "refused", tmp_path, None)
    jobs = {name: HorovodStandaloneHook(conn_id=name) for name in ("spark_auth_none", "spark_auth_wrong")}
    job = TrainingJob(
        key=key,
        payload=path.read_bytes(),
        settings=JobSettings(np=2),
        artifact_dir=str(tmp_path / "art"),
        conf={**job_conf(2, executor_cores=1), **ENCRYPTION},
    )
    with pytest.raises(
        HorovodJobError, match="REST submission server.*give the connection the spark.authenticate.secret extra"
    ):
        jobs["spark_auth_none"].submit(job, staging=tmp_path / "staging")
    with pytest.raises(HorovodJobError, match=r"spark-submit did not submit the driver to spark://") as refused:
        jobs["spark_auth_wrong"].submit(job, staging=tmp_path / "staging")
    assert wrong not in str(refused.value) and auth.master_json()["activedrivers"] == []


# --- the operator in the deployment ------------------------------------------------------------------------------


def test_the_operator_trains_on_the_authenticated_cluster_in_both_modes_with_the_secret_out_of_sight(
    airflow, auth, event_logs
):
    with CommandLines(SECRET, env_needles=(KEY_ENV,), record=("spark-submit", "SparkSubmit")) as ps:
        run_id = airflow.trigger("horovod_auth")
        state = airflow.wait_for_run("horovod_auth", run_id, timeout_s=600)
    logs = {t: _log(airflow, "horovod_auth", run_id, t) for t in ("client", "cluster")}
    assert state == "success", (
        f"{airflow.task_states('horovod_auth', run_id)}\nerrors: "
        f"{[airflow.task_error('horovod_auth', run_id, t) for t in ('client', 'cluster')]}\n"
        f"{logs['client'][-3000:]}\n{logs['cluster'][-6000:]}\n{auth.log_tail(20)}{airflow.diagnostics(40)}"
    )
    for task_id in ("client", "cluster"):
        xcoms = _out_of_sight(airflow, "horovod_auth", run_id, task_id, SECRET)
        assert xcoms["return_value"] == {"size": 2, "total": 3.0}, xcoms
        assert SECRET not in json.dumps(xcoms, default=str)
    assert "deferred" in logs["cluster"].lower() and "is FINISHED" in logs["cluster"], logs["cluster"][-3000:]
    # the conf template was rendered (the event log directory comes from a Variable)
    rendered = airflow.task_instance("horovod_auth", run_id, "cluster")["rendered_fields"]
    assert event_logs.as_uri() in json.dumps(rendered), rendered
    driver_id = airflow.xcom("horovod_auth", run_id, "cluster", "spark_submission_id")
    assert _drivers(auth)[driver_id] == "FINISHED"

    # ps: sampled through both runs, the secret and the payloads' HMAC keys were on no command line, spark-submit's
    # included (the Spark provider's hook builds the client task's, the gateway the cluster task's)
    assert ps.samples >= 20 and ps.hits == [], ps.hits
    assert len(ps.env_values) >= 2, "the HMAC keys of both jobs were read from their processes' environment"
    submits = [line for line in ps.seen if "--properties-file" in line]
    assert any("--deploy-mode cluster" in line for line in submits), ps.seen
    assert any("--deploy-mode cluster" not in line and "--load-spark-defaults" in line for line in submits), ps.seen
    # the driver's and executors' output on the worker (the cluster task's driver runs there too)
    outputs = [p for p in auth.work_dir.glob("worker-0/**/std*") if p.is_file()]
    assert any(driver_id in str(p) for p in outputs), outputs
    for path in outputs:
        text = path.read_text(errors="replace")
        assert SECRET not in text and not any(key in text for key in ps.env_values), path
    # the event logs of both applications: the secret redacted, authentication and encryption on
    logs_by_mode = {}
    for path in event_logs.iterdir():
        text = path.read_text()
        assert SECRET not in text and not any(key in text for key in ps.env_values), path
        props = _event_log_properties(path)
        logs_by_mode[props["spark.submit.deployMode"]] = props
    assert set(logs_by_mode) == {"client", "cluster"}, list(event_logs.iterdir())
    for props in logs_by_mode.values():
        assert props["spark.authenticate"] == "true" and props["spark.authenticate.secret"] == REDACTED
        assert props["spark.network.crypto.enabled"] == props["spark.io.encryption.enabled"] == "true"
    pages = [httpx.get(f"{auth.web_ui_url}{page}", timeout=5).text for page in ("/json/", "/")]
    assert all(SECRET not in page for page in pages)  # the master holds the secret, shows it nowhere


def test_a_deferred_gateway_task_marked_failed_kills_its_driver_through_the_master_ui(airflow, auth):
    dag_id = "horovod_auth_kill"
    run_id = airflow.trigger(dag_id)
    _poll(
        "the trigger to watch the RUNNING driver",
        lambda: (
            airflow.task_instance(dag_id, run_id, "train")["state"] == "deferred"
            and "is RUNNING" in _log(airflow, dag_id, run_id, "train")
        ),
        timeout_s=300,
        interval_s=2,
        on_timeout=lambda: _log(airflow, dag_id, run_id, "train")[-3000:] + auth.log_tail(20),
    )
    [driver] = auth.master_json()["activedrivers"]
    airflow.api("PATCH", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/train", json={"new_state": "failed"})
    _poll(
        f"the master to report driver {driver['id']} KILLED",
        lambda: _drivers(auth).get(driver["id"]) == "KILLED",
        timeout_s=120,
        on_timeout=lambda: f"\nmaster: {auth.master_json()}{airflow.diagnostics(60)}",
    )
    assert airflow.task_instance(dag_id, run_id, "train")["state"] == "failed"
    assert auth.master_json()["activedrivers"] == []


def test_pyspark_and_a_deferred_cluster_task_share_the_jws_connection(airflow, secured):
    run_id = airflow.trigger("horovod_secured")
    state = airflow.wait_for_run("horovod_secured", run_id, timeout_s=600)
    log = _log(airflow, "horovod_secured", run_id, "deferred")
    pyspark_log = _log(airflow, "horovod_secured", run_id, "pyspark")
    assert state == "success", f"{airflow.task_states('horovod_secured', run_id)}\n{pyspark_log[-3000:]}\n{log[-4000:]}"
    assert airflow.xcom("horovod_secured", run_id, "pyspark") == secured.cluster.master_url
    xcoms = _out_of_sight(airflow, "horovod_secured", run_id, "deferred", secured.token)
    assert xcoms["return_value"] == {"size": 2, "total": 3.0}
    assert xcoms["spark_submission_id"].startswith("driver-")
    _out_of_sight(airflow, "horovod_secured", run_id, "pyspark", secured.token)
    # deferred: the triggerer polled the REST server (behind the JWSFilter) with the connection's token
    assert "deferred" in log.lower() and "is FINISHED" in log, log[-4000:]
    assert "np=2 fits" in log and "Cannot read the Spark master's state" not in log  # /json/ over HTTPS, with the token
    assert "Ignoring non-Spark config property" not in pyspark_log  # the new layout: spark-submit carries it silently
    assert _drivers(secured.cluster) == {xcoms["spark_submission_id"]: "FINISHED"}

    old = airflow.trigger("pyspark_old_layout")
    assert airflow.wait_for_run("pyspark_old_layout", old, timeout_s=300) == "success"
    old_log = _log(airflow, "pyspark_old_layout", old, "pyspark")
    assert "Ignoring non-Spark config property: ui-port" in old_log, old_log[-4000:]  # what the new layout avoids


def test_a_wrong_token_fails_the_deferrable_task_at_once_without_a_retry(airflow, secured):
    dag_id = "horovod_secured_wrong_token"
    before = _drivers(secured.cluster)
    run_id = airflow.trigger(dag_id)
    assert airflow.wait_for_run(dag_id, run_id, timeout_s=300) == "failed"
    ti = airflow.task_instance(dag_id, run_id, "deferred")
    log = _log(airflow, dag_id, run_id, "deferred")
    assert ti["state"] == "failed" and ti["try_number"] == 1, (ti, log[-3000:])  # retries=1, not used
    assert ti["duration"] < 60, ti  # before anything was staged or submitted, no waiting
    error = airflow.task_error(dag_id, run_id, "deferred") or ""
    assert "HorovodAccessError" in error and "HTTP 403" in error and "nothing was submitted" in error, log[-3000:]
    assert "connection 'spark_secure_wrong'" in error
    assert secured.wrong_token not in log and secured.token not in log
    assert _log(airflow, dag_id, run_id, "deferred", try_number=2) == ""
    assert _drivers(secured.cluster) == before  # nothing submitted
