"""Cluster deploy mode against a real Spark standalone cluster, sync and deferrable, through real Airflow."""

from __future__ import annotations

import os
import shutil
import signal
import time
from pathlib import Path

import psutil
import pytest

from tests.conftest import airflow_env
from tests.dag_process import cmdline, dag_process
from tests.e2e.test_dags import HERE, run_dag
from tests.standalone import standalone_cluster

pytestmark = [pytest.mark.e2e, pytest.mark.spark, pytest.mark.timeout(900)]


def cluster_env(cluster, tmp_path) -> dict[str, str]:
    return {
        "AIRFLOW_CONN_SPARK_CLUSTER": cluster.airflow_connection(),
        "AIRFLOW__HOROVOD__ARTIFACT_ROOT": str(tmp_path / "artifacts"),  # the "shared filesystem"
    }


@pytest.fixture
def cluster_dags(tmp_path) -> Path:
    dags = tmp_path / "dags"
    dags.mkdir()
    shutil.copy(HERE / "dags" / "horovod_cluster.py", dags)
    return dags


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with standalone_cluster(workers=2, cores_per_worker=2, work_dir=tmp_path_factory.mktemp("standalone")) as c:
        yield c


def test_cluster_mode_sync_and_deferred(cluster, airflow_home, cluster_dags, tmp_path):
    log, run = run_dag(airflow_home, cluster_dags, "horovod_cluster", extra_env=cluster_env(cluster, tmp_path))
    assert run["states"] == {"sync": "success", "deferred": "success"}, log[-6000:]
    for task in ("sync", "deferred"):
        xcom = run["xcom"]
        assert xcom[f"{task}.return_value"] == {"size": 2, "total": 3.0, "tag": task}
        assert xcom[f"{task}.spark_submission_id"].startswith("driver-")
        assert xcom[f"{task}.spark_app_id"].startswith("app-")
        assert xcom[f"{task}.spark_ui_url"].startswith("http://")
        assert xcom[f"{task}._link_SparkUILink"] == xcom[f"{task}.spark_ui_url"]  # the "Spark UI" link, deferred too
        paths = xcom[f"{task}.artifact_paths"]
        assert [os.path.basename(p) for p in paths] == [f"{task}.pt"] and all(Path(p).is_file() for p in paths)
    assert "Driver driver-" in log and "is RUNNING" in log and "is FINISHED" in log  # progress states
    assert "deferred" in log.lower()  # the second task really went through the trigger
    state = cluster.master_json()
    assert not state["activedrivers"] and not state["activeapps"]  # nothing left running on the cluster


def _ranks(cluster) -> list[psutil.Process]:
    """The cluster's live Horovod rank processes (descendants of its worker JVMs)."""
    return [p for p in cluster.leftover_processes() if "runtime.rank.worker" in cmdline(p)]


def test_killing_the_task_kills_the_driver_and_every_rank(cluster, airflow_home, cluster_dags, tmp_path):
    env = {**airflow_env(airflow_home, cluster_dags), **cluster_env(cluster, tmp_path)}
    with dag_process(env, "horovod_cluster_long") as run:
        run.wait_for("2/2 ranks running on", timeout_s=300)  # from the Spark REST API: training is under way
        assert cluster.master_json()["activedrivers"], "no driver running on the cluster"
        ranks_up = time.monotonic() + 60  # Spark says the tasks run; their rank processes start a moment later
        while len(_ranks(cluster)) < 2 and time.monotonic() < ranks_up:
            time.sleep(0.5)
        assert len(_ranks(cluster)) == 2
        run.proc.send_signal(signal.SIGTERM)
        run.proc.wait(timeout=120)
        log = run.rest_of_log()
    assert "Kill of driver driver-" in log, log[-5000:]
    stop = time.monotonic() + 60
    while time.monotonic() < stop:  # the master applies the kill asynchronously: bounded wait for it
        state = cluster.master_json()
        if not state["activedrivers"] and not state["activeapps"]:
            break
        time.sleep(1)
    assert not state["activedrivers"] and not state["activeapps"], state
    _gone, alive = psutil.wait_procs(_ranks(cluster), timeout=30)
    assert not alive, [p.pid for p in alive]


def _wait_state(hook, submission_id: str, wanted: set[str], timeout_s: float = 90) -> str:
    deadline = time.monotonic() + timeout_s
    while True:  # the master applies submissions and kills asynchronously: a bounded poll
        state = hook.status(submission_id).driver_state
        if state in wanted or time.monotonic() > deadline:
            return state
        time.sleep(1)


def test_deferred_kill_and_retry_kill_the_driver(cluster, tmp_path, monkeypatch):
    """
    The trigger's on_kill (a deferred task killed), a retry, and a failed trigger (the task resumed with
    ``__fail__``) each kill a still-running driver.
    """
    import asyncio
    import secrets

    from airflow_provider_horovod.job import TrainingJob
    from airflow_provider_horovod.runtime.settings import JobSettings
    from airflow_provider_horovod.runtime.wire.payload import dumps_payload
    from airflow_provider_horovod.standalone.hook import HorovodStandaloneHook
    from airflow_provider_horovod.triggers.horovod import HorovodSparkJobTrigger
    from tests.e2e.dags.horovod_cluster import CONF, long_training

    for name, value in cluster_env(cluster, tmp_path).items():
        monkeypatch.setenv(name, value)
    hook = HorovodStandaloneHook(conn_id="spark_cluster")
    staging_root = tmp_path / "staging"

    def submit(try_dir: str) -> str:
        key = secrets.token_bytes(32)
        return hook.submit(
            TrainingJob(
                key=key,
                payload=dumps_payload(long_training, key=key),
                conf=CONF,
                settings=JobSettings(np=2),
                artifact_dir=str(tmp_path / "art" / try_dir),
                app_name="kill-test",
            ),
            staging=staging_root / try_dir,
        )

    first = submit("try-1")
    assert _wait_state(hook, first, {"RUNNING"}) == "RUNNING"
    trigger = HorovodSparkJobTrigger(
        submission_id=first, rest_url=hook.endpoints.rest_url, staging=str(staging_root / "try-1")
    )
    asyncio.run(trigger.on_kill())
    assert _wait_state(hook, first, {"KILLED", "FAILED", "FINISHED", "ERROR"}) == "KILLED"

    second = submit("try-1")  # an earlier try whose driver is still alive ...
    assert _wait_state(hook, second, {"RUNNING"}) == "RUNNING"
    (staging_root / "try-2").mkdir()
    assert hook.kill_earlier_tries(staging_root / "try-2") == [second]  # ... is killed by the retry
    assert _wait_state(hook, second, {"KILLED", "FAILED", "FINISHED", "ERROR"}) == "KILLED"

    from airflow.sdk.exceptions import TaskDeferralError

    from airflow_provider_horovod.operators.horovod import HorovodRunnerOperator
    from airflow_provider_horovod.xcom_keys import XCOM_SUBMISSION_ID

    third = submit("try-3")
    assert _wait_state(hook, third, {"RUNNING"}) == "RUNNING"
    op = HorovodRunnerOperator(
        task_id="train", python_callable=long_training, np=2, conn_id="spark_cluster", deferrable=True, conf=CONF
    )
    pulled: list[tuple] = []

    class TaskInstance:  # only the XCom the operator pushed at submission; a trigger failure cannot be staged
        task_id, map_index = "train", -1

        def xcom_pull(self, task_ids, key, map_indexes):
            pulled.append((task_ids, key, map_indexes))
            return third

    with pytest.raises(TaskDeferralError, match="trigger crashed"):
        op.resume_execution("__fail__", {"error": "trigger crashed"}, {"ti": TaskInstance()})
    assert pulled == [("train", XCOM_SUBMISSION_ID, -1)]
    assert _wait_state(hook, third, {"KILLED", "FAILED", "FINISHED", "ERROR"}) == "KILLED"
    deadline = time.monotonic() + 60
    while _ranks(cluster) and time.monotonic() < deadline:
        time.sleep(1)
    assert not _ranks(cluster)


class _TaskInstance:
    """The task instance fields and XCom calls the operator uses (a retry's state comes from the task state store)."""

    def __init__(self, try_number: int):
        self.dag_id, self.run_id, self.task_id, self.map_index, self.try_number = (
            "durable",
            "r1",
            "train",
            -1,
            try_number,
        )
        self.xcom: dict[str, object] = {}
        self.stats_tags: dict[str, str] = {}

    def xcom_push(self, key, value):
        self.xcom[key] = value

    def xcom_pull(self, task_ids=None, key=None, map_indexes=None):
        return self.xcom.get(key)


class _TaskStateStore(dict):
    def set(self, key, value):
        self[key] = value


def test_durable_retry_reads_a_finished_driver_and_resubmits_a_failed_one(cluster, tmp_path, monkeypatch):
    """
    ResumableJobMixin's two other branches on the real cluster: a stored driver that FINISHED is not run again (its
    result and first artifact directory are reported), a stored driver that was KILLED (never success) is replaced.
    The task state store is the one thing stubbed: only a running Airflow task has one (the reattach branch is tested
    under a real deployment in test_durable.py).
    """
    from airflow.sdk import DAG

    from airflow_provider_horovod.operators.horovod import HorovodRunnerOperator
    from tests.e2e.dags.horovod_cluster import CONF, long_training, train_and_save

    for name, value in cluster_env(cluster, tmp_path).items():
        monkeypatch.setenv(name, value)
    store = _TaskStateStore()

    def execute(try_number: int, fn, **kwargs):
        with DAG("durable", schedule=None):
            op = HorovodRunnerOperator(
                task_id="train",
                python_callable=fn,
                op_kwargs=kwargs,
                np=2,
                conn_id="spark_cluster",
                deploy_mode="cluster",
                deferrable=False,
                conf=CONF,
                poll_interval_s=1,
            )
        ti = _TaskInstance(try_number)
        return op, ti, op.execute({"ti": ti, "task_state_store": store})

    _op, first_ti, value = execute(1, train_and_save, tag="first")
    job = store[HorovodRunnerOperator.external_id_key]
    assert (
        value == {"size": 2, "total": 3.0, "tag": "first"}
        and job["submission_id"] == first_ti.xcom["spark_submission_id"]
    )
    # try 2 after a crash that came when the driver had already FINISHED: no new driver, the same result
    drivers_before = len(cluster.master_json()["completeddrivers"])
    _op, second_ti, again = execute(2, train_and_save, tag="second")
    assert again == value and second_ti.xcom["artifact_dir"] == job["artifact_dir"]
    assert second_ti.xcom["artifact_paths"] == first_ti.xcom["artifact_paths"]
    assert len(cluster.master_json()["completeddrivers"]) == drivers_before
    # a stored driver that was KILLED is never taken for success: try 3 submits a new one
    import secrets

    from airflow_provider_horovod.job import TrainingJob
    from airflow_provider_horovod.runtime.settings import JobSettings
    from airflow_provider_horovod.runtime.wire.payload import dumps_payload
    from airflow_provider_horovod.standalone.hook import HorovodStandaloneHook

    hook = HorovodStandaloneHook(conn_id="spark_cluster")
    key = secrets.token_bytes(32)
    killed = hook.submit(
        TrainingJob(
            key=key,
            payload=dumps_payload(long_training, key=key),
            conf=CONF,
            settings=JobSettings(np=2),
            artifact_dir=str(tmp_path / "killed-art"),
        ),
        staging=tmp_path / "killed",
    )
    assert _wait_state(hook, killed, {"RUNNING"}) == "RUNNING"
    hook.kill(killed)
    assert _wait_state(hook, killed, {"KILLED", "FAILED", "FINISHED", "ERROR"}) == "KILLED"
    store[HorovodRunnerOperator.external_id_key] = {
        "submission_id": killed,
        "staging": str(tmp_path / "killed"),
        "artifact_dir": str(tmp_path / "killed-art"),
    }
    _op, third_ti, fresh = execute(3, train_and_save, tag="third")
    assert fresh["tag"] == "third" and third_ti.xcom["spark_submission_id"] not in (killed, job["submission_id"])
    assert store[HorovodRunnerOperator.external_id_key]["submission_id"] == third_ti.xcom["spark_submission_id"]
