"""
Spark RPC authentication and encryption (issue #27, item 1) on a real standalone cluster of 1 worker x 2 cores
(127.0.0.1) whose own ``spark-defaults.conf`` turns on ``spark.authenticate`` with a shared secret, RPC encryption
(``spark.network.crypto.enabled``) and I/O encryption (``spark.io.encryption.enabled``); its REST submission
server is off (the master refuses to start it with the secret set, SPARK-25088).

* an application without the secret is refused by the master (so the other test cannot pass on an open cluster);
* ``HorovodHook`` trains np=2 in client deploy mode with the secret from the connection's ``spark.authenticate.secret``
  extra (this machine's ``SPARK_CONF_DIR`` has none), and the secret is in no process command line sampled during
  the run, not in the job's output, not in its result, and redacted in the Spark event log.

* ``HorovodStandaloneHook`` trains np=2 in cluster deploy mode through spark-submit's legacy gateway (the master runs
  no REST server), waited for with the hook's status (the master's ``/json/``) and then read by the deferral
  trigger's ``run()``; neither the secret nor the payload's HMAC key is on a command line (the driver's and the
  executors' included: the worker runs them here), in the driver's or executors' output, the result or the event
  log; a long job killed through the hook's ``kill`` (the master UI's kill link) ends KILLED on the master;
  without the secret the hook says which extra is missing, with a wrong one that spark-submit submitted no driver.

About 60 s on a 2-core machine (the cluster's start, one training, one refused JVM), and 45 to 85 s more for cluster
deploy mode (one training, one driver killed once its application started, one refused spark-submit).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import psutil
import pytest

from airflow_provider_horovod.utils.spark_auth import AUTH_PROPERTIES_FILE, CONNECTION_SECRET_EXTRA
from tests.integration.shared_cluster_jobs import run_client_job, wait_until
from tests.standalone import spark_home, standalone_cluster

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]

CONN_ID = "spark_auth"
SECRET = "rpc-" + secrets.token_hex(16)
ENCRYPTION = {"spark.network.crypto.enabled": "true", "spark.io.encryption.enabled": "true"}
REFUSED = "Expected SaslMessage, received something else"
"""What the master logs when a client without the secret talks to it (Spark 4.2)."""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    work = tmp_path_factory.mktemp("auth")
    (work / "conf").mkdir()
    defaults = {"spark.authenticate": "true", "spark.authenticate.secret": SECRET, **ENCRYPTION}
    (work / "conf" / "spark-defaults.conf").write_text("".join(f"{k} {v}\n" for k, v in defaults.items()))
    here = tmp_path_factory.mktemp("airflow-spark-conf")  # this machine's Spark: no secret, no defaults
    # 3 cores, 2 GiB (accounting only): cluster deploy mode's driver takes a core beside np=2's executors
    with standalone_cluster(workers=1, cores_per_worker=3, memory_per_worker="2g", work_dir=work, rest=False) as c, \
            pytest.MonkeyPatch.context() as mp:
        conn = json.loads(c.airflow_connection(deploy_mode="client"))
        conn["extra"][CONNECTION_SECRET_EXTRA] = SECRET
        mp.setenv(f"AIRFLOW_CONN_{CONN_ID.upper()}", json.dumps(conn))
        mp.setenv("SPARK_CONF_DIR", str(here))
        yield c


class _CommandLines:
    """
    Samples every process's command line (a bounded polling thread) and keeps those holding ``needle``; also the
    permission bits of the file ``watched`` while it exists.
    """

    def __init__(self, needle: str, watched: Path, period_s: float = 0.2, limit_s: float = 240.0,
                 also: tuple[str, ...] = ()) -> None:
        self.needles, self.watched, self.period_s, self.limit_s = (needle, *also), watched, period_s, limit_s
        self.hits: list[str] = []
        self.modes: set[int] = set()
        """The permission bits ``watched`` had whenever it existed."""
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        deadline = time.monotonic() + self.limit_s
        while not self._stop.is_set() and time.monotonic() < deadline:
            for proc in psutil.process_iter(["cmdline"]):
                line = " ".join(proc.info.get("cmdline") or [])
                if any(needle in line for needle in self.needles):
                    self.hits.append(line[:300])
            try:
                self.modes.add(self.watched.stat().st_mode & 0o777)
            except FileNotFoundError:
                pass
            self.samples += 1
            self._stop.wait(self.period_s)

    def __enter__(self) -> "_CommandLines":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


def test_an_application_without_the_secret_is_refused(cluster, tmp_path):
    # a plain application (Spark itself refuses encryption without spark.authenticate, before any connection)
    app = tmp_path / "app.py"
    app.write_text("from pyspark.sql import SparkSession\nSparkSession.builder.getOrCreate().stop()\n")
    master_log = cluster.log_dir / "master.log"
    seen = master_log.read_text(errors="replace").count(REFUSED)
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    out = tmp_path / "spark-submit.out"
    proc = subprocess.Popen([str(spark_home() / "bin" / "spark-submit"), "--master", cluster.master_url,
                             "--conf", "spark.driver.memory=512m", str(app)],
                            env=env, stdout=out.open("wb"), stderr=subprocess.STDOUT)
    try:  # Spark retries the registration for a minute: the master's refusal is what the test waits for
        wait_until(lambda: master_log.read_text(errors="replace").count(REFUSED) > seen,
                   "the master to refuse the application", timeout_s=120,
                   context=lambda: out.read_text(errors="replace")[-3000:] + cluster.log_tail(20))
        assert proc.poll() is None or proc.returncode != 0, out.read_text(errors="replace")[-3000:]
        assert cluster.master_json()["activeapps"] == [] and cluster.master_json()["completedapps"] == []
    finally:
        with contextlib.suppress(psutil.NoSuchProcess):
            for child in psutil.Process(proc.pid).children(recursive=True):
                child.kill()
        proc.kill()
        proc.wait(timeout=30)


def test_client_mode_trains_with_the_secret_kept_out_of_sight(cluster, tmp_path):
    events = tmp_path / "events"
    events.mkdir()
    conf = {**ENCRYPTION, "spark.eventLog.enabled": "true", "spark.eventLog.dir": events.as_uri(),
            "spark.eventLog.compress": "false", "spark.eventLog.rolling.enabled": "false"}
    lines: list[str] = []
    with _CommandLines(SECRET, tmp_path / "staging" / "auth" / AUTH_PROPERTIES_FILE) as ps:
        result = run_client_job(CONN_ID, 2, "auth", tmp_path, lines=lines, conf=conf)
    context = "\n".join(lines[-40:]) + cluster.log_tail(10)
    assert result.value["size"] == 2 and result.value["total"] == 2.0, context
    assert ps.samples >= 5 and ps.hits == [], ps.hits  # sampled through the run; never on a command line
    assert all(SECRET not in line for line in lines)
    assert SECRET not in repr(result) and SECRET not in repr(result.value)
    assert ps.modes == {0o600}  # the properties file spark-submit read the secret from: owner-only
    assert not (tmp_path / "staging" / "auth" / AUTH_PROPERTIES_FILE).exists()  # removed once spark-submit ended
    [log] = list(events.iterdir())
    text = log.read_text()
    assert SECRET not in text
    env = next(json.loads(e) for e in text.splitlines() if '"SparkListenerEnvironmentUpdate"' in e)
    props = dict(env["Spark Properties"])
    assert props["spark.authenticate"] == "true" and props["spark.authenticate.secret"] == "*********(redacted)"
    assert props["spark.network.crypto.enabled"] == props["spark.io.encryption.enabled"] == "true"
    # the executors are the worker's: it passes them the secret in their environment, not their command line
    assert all(SECRET not in p.read_text(errors="replace") for p in cluster.work_dir.glob("worker-0/app-*/*/std*"))
    assert httpx.get(f"{cluster.web_ui_url}/json/", timeout=5).json()["completedapps"][0]["state"] == "FINISHED"


def _cluster_job(tmp_path: Path, tag: str, gate: Path | None = None, conf: dict | None = None):
    from airflow_provider_horovod.hooks.standalone import HorovodStandaloneHook
    from airflow_provider_horovod.runtime.settings import JobSettings
    from tests.integration.shared_cluster_jobs import job_conf, payload_file

    hook = HorovodStandaloneHook(conn_id=CONN_ID, np=2, name=f"auth-{tag}",
                                 conf={**job_conf(2, executor_cores=1), **ENCRYPTION, **(conf or {})})
    staging = tmp_path / "staging" / tag
    path, key = payload_file(staging, tag, tmp_path, gate)
    submission_id = hook.submit(staging=staging, payload=path.read_bytes(), key=key,
                                artifact_dir=str(tmp_path / "artifacts" / tag),
                                settings=JobSettings(np=2, slot_wait_timeout_s=120))
    return hook, staging, submission_id, key


def test_cluster_mode_trains_through_the_gateway_with_the_secret_kept_out_of_sight(cluster, tmp_path):
    import asyncio

    import cloudpickle

    from airflow_provider_horovod.hooks.standalone import HorovodStandaloneHook
    from airflow_provider_horovod.triggers.horovod import HorovodSparkJobTrigger
    from airflow_provider_horovod.utils.driver_poll import read_poll
    from airflow_provider_horovod.utils.standalone_gateway import GATEWAY_JAR

    events = tmp_path / "events"
    events.mkdir()
    conf = {"spark.eventLog.enabled": "true", "spark.eventLog.dir": events.as_uri(),
            "spark.eventLog.compress": "false", "spark.eventLog.rolling.enabled": "false"}
    polls = []
    with _CommandLines(SECRET, tmp_path / "unused") as ps:
        hook, staging, submission_id, key = _cluster_job(tmp_path, "gateway", conf=conf)
        ps.needles += (key.hex(),)  # the payload's HMAC key: on no command line either
        assert hook.uses_gateway and (staging / GATEWAY_JAR).exists()

        def ended():
            poll = read_poll(submission_id, hook.status(submission_id), HorovodStandaloneHook.app_started(staging),
                             polls[-1] if polls else None)
            polls.append(poll)
            return poll.done

        wait_until(ended, f"driver {submission_id} to end", timeout_s=240, context=lambda: cluster.log_tail(20))
    driver_files = list(cluster.work_dir.glob(f"worker-0/{submission_id}/*"))
    context = "\n".join(p.read_text(errors="replace")[-3000:] for p in driver_files if p.name.startswith("std"))
    assert polls[-1].outcome == "success" and polls[-1].driver_state == "FINISHED", context
    assert polls[-1].app_id and polls[-1].app_id.startswith("app-"), polls
    result = HorovodStandaloneHook.result(staging, hook.status(submission_id))
    value = cloudpickle.loads(result.return_value)
    assert value["size"] == 2 and value["total"] == 2.0, context
    assert "HMAC ok" in context  # the key reached the driver, in its environment
    # the deferral trigger reads the same driver from the master's /json/ (no REST server here)
    trigger = HorovodSparkJobTrigger(submission_id=submission_id, rest_url=hook.endpoints.rest_url,
                                     staging=str(staging), poll_interval_s=0.5, conn_id=CONN_ID,
                                     master_ui_url=hook.endpoints.master_ui_url)

    async def first_event():
        async for event in trigger.run():
            return event.payload

    event = asyncio.run(asyncio.wait_for(first_event(), timeout=60))
    assert event["status"] == "success" and event["driver_state"] == "FINISHED", event
    assert event["app_id"] == polls[-1].app_id
    assert ps.samples >= 5 and ps.hits == [], ps.hits
    assert SECRET not in repr(result) and SECRET not in repr(value) and SECRET not in repr(event)
    assert not list(staging.glob("*.properties"))
    for path in [*driver_files, *cluster.work_dir.glob(f"worker-0/{polls[-1].app_id}/*/std*")]:
        text = path.read_text(errors="replace") if path.is_file() and path.suffix != ".jar" else ""
        assert SECRET not in text and key.hex() not in text, path
    pages = [httpx.get(f"{cluster.web_ui_url}{page}", timeout=5).text for page in ("/json/", "/")]
    assert all(SECRET not in page and key.hex() not in page for page in pages)  # the master holds both, shows neither
    [log] = list(events.iterdir())
    text = log.read_text()
    assert SECRET not in text and key.hex() not in text
    env = next(json.loads(e) for e in text.splitlines() if '"SparkListenerEnvironmentUpdate"' in e)
    props = dict(env["Spark Properties"])
    assert props["spark.authenticate.secret"] == "*********(redacted)" and props["spark.submit.deployMode"] == "cluster"


def test_a_cluster_mode_driver_is_killed_through_the_master_ui(cluster, tmp_path):
    from airflow_provider_horovod.hooks.standalone import HorovodStandaloneHook

    gate = tmp_path / "never"  # the ranks wait for it: the job runs until killed
    hook, staging, submission_id, _ = _cluster_job(tmp_path, "killed", gate=gate)
    wait_until(lambda: HorovodStandaloneHook.app_started(staging)[0] or hook.status(submission_id).is_terminal,
               "the driver's application to start", timeout_s=240, context=lambda: cluster.log_tail(20))
    assert hook.status(submission_id).driver_state == "RUNNING"
    hook.kill(submission_id)
    wait_until(lambda: hook.status(submission_id).is_terminal, f"driver {submission_id} to end", timeout_s=60,
               context=lambda: cluster.log_tail(20))
    assert hook.status(submission_id).driver_state == "KILLED"
    [driver] = [d for d in cluster.master_json()["completeddrivers"] if d["id"] == submission_id]
    assert driver["state"] == "KILLED"


def test_cluster_mode_without_the_right_secret_fails_saying_why(cluster, tmp_path, monkeypatch):
    from airflow_provider_horovod.exceptions import HorovodJobError
    from airflow_provider_horovod.hooks.standalone import HorovodStandaloneHook
    from tests.integration.shared_cluster_jobs import job_conf, payload_file

    conn = json.loads(os.environ[f"AIRFLOW_CONN_{CONN_ID.upper()}"])
    wrong = "rpc-wrong-" + secrets.token_hex(8)
    for name, extra in (("spark_auth_none", {}), ("spark_auth_wrong", {CONNECTION_SECRET_EXTRA: wrong})):
        monkeypatch.setenv(f"AIRFLOW_CONN_{name.upper()}", json.dumps(
            {**conn, "extra": {**{k: v for k, v in conn["extra"].items() if k != CONNECTION_SECRET_EXTRA}, **extra}}))
    path, key = payload_file(tmp_path / "staging", "refused", tmp_path, None)
    jobs = {name: HorovodStandaloneHook(conn_id=name, np=2, conf={**job_conf(2, executor_cores=1), **ENCRYPTION})
            for name in ("spark_auth_none", "spark_auth_wrong")}
    with pytest.raises(HorovodJobError, match="REST submission server.*give the connection the "
                                              "spark.authenticate.secret extra"):
        jobs["spark_auth_none"].submit(staging=tmp_path / "staging", payload=path.read_bytes(), key=key,
                                       artifact_dir=str(tmp_path / "art"))
    with pytest.raises(HorovodJobError, match=r"spark-submit did not submit the driver to spark://") as refused:
        jobs["spark_auth_wrong"].submit(staging=tmp_path / "staging", payload=path.read_bytes(), key=key,
                                        artifact_dir=str(tmp_path / "art"))
    assert wrong not in str(refused.value) and cluster.master_json()["activedrivers"] == []
