"""
A real Spark History Server for tests: ``spark-class org.apache.spark.deploy.history.HistoryServer`` from the pip
pyspark, bound to 127.0.0.1 on a free port, reading event logs from one directory::

    with history_server(tmp_path / "events") as hs:   # hs.url  http://127.0.0.1:PORT
        ...  # run applications with spark.eventLog.enabled=true, spark.eventLog.dir=file://<tmp_path>/events
        hs.wait_for_app(app_id)                       # until /api/v1/applications/<id> answers

On exit the server's process group is killed and checked gone.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.standalone import HOST, free_port, spark_home


@dataclass
class HistoryServer:
    """A started history server (see :func:`history_server`)."""

    url: str
    """``http://127.0.0.1:PORT``"""
    log_dir: Path
    """Where it reads event logs (``spark.eventLog.dir`` is ``file://`` + this)."""
    log_file: Path
    """The server's own output."""

    def wait_for_app(self, app_id: str, timeout_s: float = 60.0) -> dict:
        """
        Wait until the server lists ``app_id`` (it scans ``log_dir`` every second) and return its summary.

        :raises TimeoutError: not listed within ``timeout_s`` (with the end of the server's log).
        """
        deadline = time.monotonic() + timeout_s
        while True:
            with contextlib.suppress(httpx.HTTPError):
                response = httpx.get(f"{self.url}/api/v1/applications/{app_id}", timeout=5)
                if response.status_code == 200:
                    return response.json()
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"the history server did not list {app_id} within {timeout_s:g} s\n"
                    + self.log_file.read_text(errors="replace")[-3000:]
                )
            time.sleep(0.5)  # the server rescans the directory every second: a bounded poll


@contextlib.contextmanager
def history_server(log_dir: Path, *, start_timeout_s: float = 60.0, port: int | None = None) -> Iterator[HistoryServer]:
    """
    Start a Spark History Server on 127.0.0.1 reading ``log_dir`` (created), and wait until it answers.

    :param log_dir: the event log directory.
    :param start_timeout_s: seconds to wait for ``/api/v1/applications`` to answer.
    :param port: its port on 127.0.0.1 (default: a free one).
    :raises TimeoutError: it did not answer in time (with its log).
    :raises RuntimeError: it exited while starting.
    """
    log_dir.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    log_file = log_dir.parent / f"history-server-{port}.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPARK_", "PYSPARK_"))}
    env.update(
        {
            "SPARK_HOME": str(spark_home()),
            "SPARK_LOCAL_IP": HOST,
            "SPARK_DAEMON_MEMORY": "256m",
            "SPARK_HISTORY_OPTS": " ".join(
                f"-D{k}={v}"
                for k, v in {
                    "spark.history.fs.logDirectory": f"file://{log_dir}",
                    "spark.history.ui.port": str(port),
                    "spark.history.fs.update.interval": "1s",
                    "spark.port.maxRetries": "0",
                }.items()
            ),
        }
    )
    with open(log_file, "wb") as out:
        proc = subprocess.Popen(
            [str(spark_home() / "bin" / "spark-class"), "org.apache.spark.deploy.history.HistoryServer"],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    server = HistoryServer(url=f"http://{HOST}:{port}", log_dir=log_dir, log_file=log_file)
    try:
        deadline = time.monotonic() + start_timeout_s
        while True:
            if proc.poll() is not None:
                raise RuntimeError(
                    f"the history server exited with {proc.returncode}\n" + log_file.read_text(errors="replace")[-3000:]
                )
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{server.url}/api/v1/applications", timeout=2).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"the history server did not answer within {start_timeout_s:g} s\n"
                    + log_file.read_text(errors="replace")[-3000:]
                )
            time.sleep(0.25)  # readiness poll of an external process, bounded by the deadline
        yield server
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
