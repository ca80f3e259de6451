"""A real Spark Connect server on 127.0.0.1 for tests (``spark-submit --class ...SparkConnectServer``)."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil

VENV_BIN = Path(sys.executable).parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def connect_server(work_dir: Path, slots: int = 2, timeout_s: float = 120) -> Iterator[str]:
    """
    Start a Spark Connect server with a ``local[slots]`` master; yield its ``sc://127.0.0.1:PORT`` URL.

    Readiness is the gRPC port accepting connections (polled with a deadline); on exit the server's whole
    process tree is stopped.
    """
    port = _free_port()
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
    log = open(work_dir / "connect-server.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [
            str(VENV_BIN / "spark-submit"),
            "--master",
            f"local[{slots}]",
            "--class",
            "org.apache.spark.sql.connect.service.SparkConnectServer",
            "--conf",
            f"spark.connect.grpc.binding.port={port}",
            "--conf",
            "spark.connect.grpc.binding.address=127.0.0.1",
            "--conf",
            "spark.driver.host=127.0.0.1",
            "--conf",
            "spark.driver.bindAddress=127.0.0.1",
            "--conf",
            "spark.ui.enabled=false",
            "--conf",
            f"spark.pyspark.python={sys.executable}",
            "spark-internal",
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=work_dir,
    )
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            if proc.poll() is not None:
                raise RuntimeError(
                    f"Spark Connect server exited: {(work_dir / 'connect-server.log').read_text()[-3000:]}"
                )
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            if time.monotonic() > deadline:
                raise TimeoutError(f"Spark Connect server not listening on {port} after {timeout_s} s")
            time.sleep(0.5)  # readiness poll of an external process
        yield f"sc://127.0.0.1:{port}"
    finally:
        tree = (
            [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
            if proc.poll() is None
            else []
        )
        for p in tree:
            with contextlib.suppress(psutil.Error):
                p.terminate()
        _gone, alive = psutil.wait_procs(tree, timeout=20)
        for p in alive:
            with contextlib.suppress(psutil.Error):
                p.kill()
        log.close()
