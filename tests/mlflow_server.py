"""
A real MLflow tracking server on 127.0.0.1 for the MLflow tests: SQLite backend store, local artifact root, in its
own virtualenv (``scripts/setup_mlflow_server.sh``: the server's pins are not Airflow's). The client side
(``mlflow-skinny``) is the ``mlflow`` extra, installed with the package.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.s3_server import _free_port

REPO = Path(__file__).resolve().parent.parent
SERVER_VENV = Path(os.environ.get("MLFLOW_SERVER_VENV", REPO / ".venv-mlflow-server"))


def mlflow_server_binary() -> Path:
    """The server venv's ``mlflow``; a missing one fails the test with the command that makes it."""
    binary = SERVER_VENV / "bin" / "mlflow"
    assert binary.exists(), f"no MLflow server at {binary}: run `bash scripts/setup_mlflow_server.sh`"
    return binary


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory) -> Iterator[str]:
    """The server's URL; stopped after the module (its log is printed when it does not come up in 120 s)."""
    pytest.importorskip("mlflow", reason="the mlflow extra (mlflow-skinny) is not installed")
    root = tmp_path_factory.mktemp("mlflow-server")
    port = _free_port()
    log = open(root / "server.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [str(mlflow_server_binary()), "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
         "--backend-store-uri", f"sqlite:///{root / 'mlflow.db'}", "--artifacts-destination", str(root / "art")],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"{url}/health", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the MLflow server did not start:\n{(root / 'server.log').read_text()[-3000:]}")
            time.sleep(0.5)
        yield url
    finally:
        os.killpg(proc.pid, 15)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()
        log.close()
