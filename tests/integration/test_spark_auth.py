"""
Spark RPC authentication and encryption (issue #27, item 1) on a real standalone cluster of 1 worker x 2 cores
(127.0.0.1) whose own ``spark-defaults.conf`` turns on ``spark.authenticate`` with a shared secret, RPC encryption
(``spark.network.crypto.enabled``) and I/O encryption (``spark.io.encryption.enabled``); its REST submission
server is off (the master refuses to start it with the secret set, SPARK-25088).

* an application without the secret is refused by the master (so the other test cannot pass on an open cluster);
* ``HorovodHook`` trains np=2 in client deploy mode with the secret from the connection's ``spark.authenticate.secret``
  extra (this machine's ``SPARK_CONF_DIR`` has none), and the secret is in no process command line sampled during
  the run, not in the job's output, not in its result, and redacted in the Spark event log.

About 60 s on a 2-core machine (the cluster's start, one training, one refused JVM).
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
    with standalone_cluster(workers=1, cores_per_worker=2, work_dir=work, rest=False) as c, \
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

    def __init__(self, needle: str, watched: Path, period_s: float = 0.2, limit_s: float = 240.0) -> None:
        self.needle, self.watched, self.period_s, self.limit_s = needle, watched, period_s, limit_s
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
                if self.needle in line:
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
