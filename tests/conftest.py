"""Shared fixtures: a real local Spark bound to 127.0.0.1, and an isolated Airflow home on SQLite."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
VENV_BIN = Path(sys.executable).parent


SESSION_MARK = "APH_TEST_SESSION"
"""Environment variable set for the whole test session; every process the tests start inherits it."""


@pytest.fixture(scope="session", autouse=True)
def session_mark() -> Iterator[str]:
    """Tag this session's processes (Spark, ranks) so checks for leftovers ignore unrelated ones."""
    value = uuid.uuid4().hex
    saved = os.environ.get(SESSION_MARK)
    os.environ[SESSION_MARK] = value
    try:
        yield value
    finally:
        if saved is None:
            os.environ.pop(SESSION_MARK, None)
        else:
            os.environ[SESSION_MARK] = saved


def session_processes(marker: str, *, cmdline_contains: str | None = None) -> list:
    """Live processes started by this test session (optionally whose command line contains a string)."""
    import psutil

    found = []
    for proc in psutil.process_iter(["cmdline", "environ"]):
        try:
            environ = proc.info.get("environ") or {}
            cmdline = " ".join(proc.info.get("cmdline") or [])
        except psutil.Error:
            continue
        if environ.get(SESSION_MARK) == marker and (cmdline_contains is None or cmdline_contains in cmdline):
            found.append(proc)
    return found


@pytest.fixture(scope="session")
def spark_env() -> Iterator[None]:
    """Spark on loopback with executors on this interpreter; the previous environment is restored."""
    wanted = {"SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    saved = {k: os.environ.get(k) for k in wanted}
    os.environ.update(wanted)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@pytest.fixture(scope="session")
def spark(spark_env: None):
    """A real ``local[2]`` SparkSession shared by the integration tests."""
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2]")
        .appName("airflow-provider-horovod-tests")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.scheduler.barrier.maxConcurrentTasksCheck.interval", "1s")
        .config("spark.scheduler.barrier.maxConcurrentTasksCheck.maxFailures", "3")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
    # py4j logs "Closing down clientserver connection" from __del__ at interpreter exit, after pytest has
    # closed its capture streams; keep that out of the run's output.
    logging.getLogger("py4j").setLevel(logging.WARNING)


def airflow_env(home: Path, dags_folder: Path) -> dict[str, str]:
    """Environment for an ``airflow`` subprocess with its own SQLite home and DAG folder."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env.update(
        {
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(dags_folder),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
            "SPARK_LOCAL_IP": "127.0.0.1",
            "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        }
    )
    return env


@pytest.fixture(scope="session")
def airflow_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A migrated Airflow home (SQLite) for ``airflow dags test`` runs."""
    home = tmp_path_factory.mktemp("airflow-home")
    subprocess.run(
        [str(VENV_BIN / "airflow"), "db", "migrate"],
        env=airflow_env(home, home / "dags"),
        check=True,
        capture_output=True,
        timeout=300,
    )
    return home
