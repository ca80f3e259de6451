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


class MlflowServer:
    """
    ``mlflow server`` on 127.0.0.1 with its SQLite store and artifacts under ``root``; :meth:`stop` and
    :meth:`start` again keep the port and the store (a restart, as an outage test needs).

    :param root: the server's directory (store, artifacts, log).
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._proc: subprocess.Popen | None = None

    def start(self, timeout_s: float = 120) -> None:
        """Start it and wait until ``/health`` answers 200; its log is in the error when it does not."""
        with open(self.root / "server.log", "ab") as log:
            self._proc = subprocess.Popen(
                [
                    str(mlflow_server_binary()),
                    "server",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(self.port),
                    "--workers",
                    "1",
                    "--backend-store-uri",
                    f"sqlite:///{self.root / 'mlflow.db'}",
                    "--artifacts-destination",
                    str(self.root / "art"),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                if httpx.get(f"{self.url}/health", timeout=5).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if self._proc.poll() is not None or time.monotonic() > deadline:
                log_text = (self.root / "server.log").read_text()
                raise RuntimeError(f"the MLflow server did not start:\n{log_text[-3000:]}")
            time.sleep(0.5)

    @property
    def running(self) -> bool:
        """Started and not stopped."""
        return self._proc is not None

    def stop(self) -> None:
        """Stop it (SIGTERM to its process group, SIGKILL after 20 s)."""
        if self._proc is None:
            return
        os.killpg(self._proc.pid, 15)
        try:
            self._proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(self._proc.pid, 9)
            self._proc.wait()
        self._proc = None


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory) -> Iterator[str]:
    """The server's URL; stopped after the module (its log is printed when it does not come up in 120 s)."""
    pytest.importorskip("mlflow", reason="the mlflow extra (mlflow-skinny) is not installed")
    server = MlflowServer(tmp_path_factory.mktemp("mlflow-server"))
    try:
        server.start()
        yield server.url
    finally:
        server.stop()
