"""Fault injection through real Airflow: a killed task, a retry, two runs at once."""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from tests.conftest import REPO, VENV_BIN, airflow_env
from tests.dag_process import cmdline, dag_process
from tests.e2e.test_dags import run_dag

pytestmark = [pytest.mark.faults, pytest.mark.spark, pytest.mark.e2e]

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def fault_dags(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("fault-dags")
    for dag_file in (HERE / "dags").glob("*.py"):
        shutil.copy(dag_file, folder)
    return folder


def test_sigterm_to_the_airflow_task_stops_spark_and_every_rank(airflow_home, fault_dags):
    with dag_process(airflow_env(airflow_home, fault_dags), "horovod_long_training") as run:
        run.wait_for("[rank 0] training started", timeout_s=240)
        tree = run.descendants()
        cmdlines = [cmdline(p) for p in tree]
        assert any("SparkSubmit" in c for c in cmdlines) and sum("runtime.rank.worker" in c for c in cmdlines) == 2
        run.proc.send_signal(signal.SIGTERM)
        # bounded, with room for a loaded 2-core host: on one, this exit once took over 120 s (41 s when idle)
        run.proc.wait(timeout=240)
        log = run.rest_of_log()
    assert "Stopping the Spark job" in log
    assert "stopped because the Airflow task was killed" in log
    _gone, alive = psutil.wait_procs(tree, timeout=20)
    assert not alive, [cmdline(p) for p in alive]


def test_retry_gets_its_own_artifact_dir_and_leaves_the_first_try_intact(airflow_home, fault_dags):
    log, run = run_dag(airflow_home, fault_dags, "horovod_retry")
    assert run["states"] == {"train": "success"}, log[-4000:]
    assert run["tries"]["train"] == 2
    assert "transient failure on the first try" in log
    paths = run["xcom"]["train.artifact_paths"]
    assert len(paths) == 1 and paths[0].endswith("/train/try-2/model.pt")
    first_try = Path(paths[0]).parent.parent / "try-1" / "model.pt"
    assert first_try.read_text() == "weights from try-1"
    assert Path(paths[0]).read_text() == "weights from try-2"
    assert run["xcom"]["train.return_value"] == "try-2"


def test_two_runs_at_once_are_isolated(tmp_path_factory, fault_dags):
    """Two Airflow deployments run the same two-task DAG at the same time on one machine."""
    shared_root = tmp_path_factory.mktemp("shared-artifacts")
    procs = []
    for i in range(2):
        home = tmp_path_factory.mktemp(f"home-{i}")
        env = {**airflow_env(home, fault_dags), "AIRFLOW__HOROVOD__ARTIFACT_ROOT": str(shared_root)}
        subprocess.run(
            [str(VENV_BIN / "airflow"), "db", "migrate"], env=env, check=True, capture_output=True, timeout=300
        )
        procs.append(
            (
                env,
                subprocess.Popen(
                    [str(VENV_BIN / "airflow"), "dags", "test", "horovod_parallel"],
                    env=env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                ),
            )
        )
    results = []
    for env, proc in procs:
        out, _ = proc.communicate(timeout=600)
        show = subprocess.run(
            [str(VENV_BIN / "python"), str(REPO / "scripts" / "show_run.py"), "--json", "horovod_parallel"],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
        import json

        results.append((out, json.loads(show.stdout.strip().splitlines()[-1])))
    dirs = set()
    for out, run in results:
        assert run["states"] == {"a": "success", "b": "success"}, out[-4000:]
        for task in ("a", "b"):
            assert run["xcom"][f"{task}.return_value"] == {"rank": 0, "size": 2}
            dirs.add(run["xcom"][f"{task}.artifact_dir"])
    assert len(dirs) == 4 and all(d.startswith(str(shared_root)) for d in dirs)


def test_sigkill_of_the_airflow_task_process_takes_the_driver_down(airflow_home, fault_dags):
    """kill -9 runs no handler: the spark-submit process must still not outlive the task process."""
    with dag_process(airflow_env(airflow_home, fault_dags), "horovod_long_training") as run:
        run.wait_for("[rank 0] training started", timeout_s=240)
        tree = run.descendants()
        run.proc.kill()
        run.proc.wait(timeout=60)
    _gone, alive = psutil.wait_procs(tree, timeout=60)
    leftover = [cmdline(p) for p in alive]
    for p in alive:  # clean up before failing
        p.kill()
    assert not leftover, leftover


def test_execution_timeout_stops_spark_and_every_rank(airflow_home, fault_dags, session_mark):
    started = time.monotonic()
    log, run = run_dag(airflow_home, fault_dags, "horovod_execution_timeout")
    assert run["states"] == {"train": "failed"}, log[-4000:]
    assert "AirflowTaskTimeout" in log or "Timeout" in log
    assert "Stopping the Spark job" in log  # on_kill ran
    assert time.monotonic() - started < 240
    from tests.conftest import session_processes

    _gone, alive = psutil.wait_procs(
        session_processes(session_mark, cmdline_contains="runtime.rank.worker"), timeout=30
    )
    assert not alive, [cmdline(p) for p in alive]
