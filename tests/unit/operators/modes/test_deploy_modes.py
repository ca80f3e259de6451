"""
Each deploy mode on its own, against a fake hook and a recording task instance: what it hands its hook, what it
pushes, what it returns and how it stops (issue #23). The real hooks are exercised by the integration and e2e suites.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

import cloudpickle
import pytest

from airflow_provider_horovod.clients import DriverStatus, SparkRestAccess
from airflow_provider_horovod.exceptions import HorovodJobError
from airflow_provider_horovod.job import TrainingJob
from airflow_provider_horovod.operators._reporting import JobReporter
from airflow_provider_horovod.operators.modes import cluster_manager, resolve_deploy_mode
from airflow_provider_horovod.operators.modes.client import ClientMode
from airflow_provider_horovod.operators.modes.cluster import ClusterMode, ClusterOptions
from airflow_provider_horovod.operators.modes.connect import ConnectMode
from airflow_provider_horovod.runtime.settings import JobSettings
from airflow_provider_horovod.standalone.durable import ABANDONED, KILL_MARKER
from airflow_provider_horovod.standalone.master import StandaloneEndpoints
from airflow_provider_horovod.utils.job_result import JobResult

LOG = logging.getLogger("test_deploy_modes")


class FakeTI:
    """The task instance as the modes use it: XCom pushes and pulls, its identity."""

    def __init__(self, try_number: int = 1) -> None:
        self.xcom: dict[str, Any] = {}
        self.dag_id, self.run_id, self.task_id, self.map_index, self.try_number = "d", "r", "train", -1, try_number

    def xcom_push(self, key: str, value: Any) -> None:
        self.xcom[key] = value

    def xcom_pull(self, *, task_ids: str, key: str, map_indexes: int = -1) -> Any:
        assert (task_ids, map_indexes) == (self.task_id, self.map_index)
        return self.xcom.get(key)


def _reporter(links: list) -> JobReporter:
    return JobReporter(
        log=LOG,
        conn_id=None,
        poll_interval_s=None,
        max_return_value_bytes=1024,
        publish_link=lambda ti, url: links.append(url),
    )


def _request(tmp_path: Path, **settings: Any) -> TrainingJob:
    return TrainingJob(
        key=b"k" * 32,
        payload=b"signed payload",
        artifact_dir=str(tmp_path / "art"),
        settings=JobSettings(np=2, **settings),
        env={"A": "1"},
        label="d.train",
    )


def _result(tmp_path: Path, value: Any) -> JobResult:
    return JobResult(
        app_id="app-1",
        ui_url="http://127.0.0.1:4040",
        artifact_paths=[str(tmp_path / "art/model.pt")],
        return_value=cloudpickle.dumps(value),
    )


class FakeClientHook:
    def __init__(self, result: JobResult) -> None:
        self.result, self.calls, self.killed = result, [], False

    def run_job(self, job: TrainingJob, **kwargs: Any) -> JobResult:
        self.calls.append({**kwargs, "job": job, "payload": Path(kwargs["payload_path"]).read_bytes()})
        kwargs["on_app_started"]("app-1", None)
        return self.result

    def on_kill(self) -> None:
        self.killed = True


def test_client_mode_hands_its_hook_the_request_and_pushes_the_result(tmp_path):
    hook, links, ti = FakeClientHook(_result(tmp_path, {"loss": 0.1})), [], FakeTI()
    ti.xcom_push("artifact_dir", str(tmp_path / "art"))
    mode = ClientMode(_request(tmp_path, gloo_timeout_s=60), hook, _reporter(links))
    staging = mode.submit_job({"ti": ti})
    assert oct(os.stat(staging).st_mode & 0o777) == "0o700"
    mode.poll_until_complete(staging, {"ti": ti})
    [call] = hook.calls
    assert call["payload"] == b"signed payload" and call["job"] is mode.job  # the job as the mode was given it
    assert call["job"].settings == JobSettings(np=2, gloo_timeout_s=60)
    assert not os.path.exists(staging)  # the payload's private directory is removed after the job
    assert mode.get_job_result(staging, {"ti": ti}) == {"loss": 0.1}
    assert ti.xcom["spark_app_id"] == "app-1" and ti.xcom["artifact_paths"] == [str(tmp_path / "art/model.pt")]
    assert links == []  # no UI: nothing to link
    mode.on_kill()
    assert hook.killed


class FakeConnectHook:
    def __init__(self, outcome: Any) -> None:
        self.outcome, self.calls, self.killed = outcome, [], False

    def run(self, job: TrainingJob) -> JobResult:
        self.calls.append(job)
        if isinstance(self.outcome, Exception):
            raise self.outcome
        return self.outcome

    def on_kill(self) -> None:
        self.killed = True


def test_connect_mode_runs_the_request_through_its_hook(tmp_path):
    hook, ti = FakeConnectHook(_result(tmp_path, 3)), FakeTI()
    mode = ConnectMode(_request(tmp_path), hook, _reporter([]))
    mode.check()
    assert mode.submit_job({"ti": ti}) is None
    mode.poll_until_complete(None, {"ti": ti})
    assert hook.calls == [_request(tmp_path)]  # the whole job: payload, settings, env, artifact_dir, label
    assert mode.get_job_result(None, {"ti": ti}) == 3
    mode.on_kill()
    assert hook.killed


def test_connect_mode_refuses_storage_credentials_and_passes_the_hook_s_error_on(tmp_path):
    request = TrainingJob(**{**_request(tmp_path).__dict__, "has_storage_credentials": True})
    with pytest.raises(HorovodJobError, match="with Spark Connect give a plain URI"):
        ConnectMode(request, FakeConnectHook(None), _reporter([])).check()
    failing = HorovodJobError("Horovod rank 1 failed", failure={"rank": 1})
    mode = ConnectMode(_request(tmp_path), FakeConnectHook(failing), _reporter([]))
    with pytest.raises(HorovodJobError) as raised:
        mode.poll_until_complete(None, {"ti": FakeTI()})
    assert raised.value.rank == 1


class FakeStandaloneHook:
    """The standalone hook's calls, the master's answers scripted: driver states in order, the last one sticking."""

    conn_id = "spark_cluster"
    uses_gateway = False
    access = SparkRestAccess()
    endpoints = StandaloneEndpoints(
        master_url="spark://127.0.0.1:7077", rest_url="http://127.0.0.1:6066", master_ui_url="http://127.0.0.1:8080"
    )

    def __init__(self, *states: str, killed_headline: str | None = None) -> None:
        self.states, self.calls, self.killed, self.killed_headline = list(states), [], [], killed_headline

    def kill_earlier_tries(self, staging: Any) -> list[str]:
        self.calls.append(("kill_earlier_tries", staging.uri))
        return []

    def submit(self, job: TrainingJob, *, staging: Any) -> str:
        self.calls.append(("submit", {"job": job, "staging": staging}))
        staging.create()
        return "driver-1"

    def status(self, submission_id: str) -> DriverStatus:
        state = self.states.pop(0) if len(self.states) > 1 else self.states[0]
        return DriverStatus.model_validate({"success": True, "driverState": state, "submissionId": submission_id})

    def kill(self, submission_id: str) -> None:
        self.killed.append(submission_id)

    def killed_from_outside(self, submission_id: str, driver_state: str | None, app_id: str | None) -> str | None:
        return self.killed_headline if driver_state != "FINISHED" else None


def _finish_driver(staging: Path, value: Any, status: str = "success", message: str | None = None) -> None:
    (staging / "status.json").write_text(json.dumps({"app_id": "app-1", "ui_url": None}))
    (staging / "result.pkl").write_bytes(cloudpickle.dumps(value))
    (staging / "result.json").write_text(
        json.dumps(
            {
                "status": status,
                "app_id": "app-1",
                "ui_url": None,
                "artifact_paths": [],
                "error": None,
                "message": message,
            }
        )
    )


def _cluster(tmp_path: Path, hook: FakeStandaloneHook, **options: Any) -> ClusterMode:
    return ClusterMode(
        _request(tmp_path),
        hook,
        _reporter([]),
        ClusterOptions(staging_dir=str(tmp_path / "staging" / "try-1"), poll_interval_s=None, **options),
    )


def test_cluster_mode_submits_waits_and_reads_the_result(tmp_path):
    hook, ti = FakeStandaloneHook("RUNNING", "FINISHED"), FakeTI()
    mode = _cluster(tmp_path, hook)
    record = mode.submit_job({"ti": ti})
    assert record == {
        "submission_id": "driver-1",
        "staging": str(tmp_path / "staging" / "try-1"),
        "artifact_dir": str(tmp_path / "art"),
        "try_number": 1,
        "deferred": False,
        "cancel_on_kill": True,
    }
    [earlier, (_, submitted)] = hook.calls
    assert earlier == ("kill_earlier_tries", str(tmp_path / "staging" / "try-1"))
    assert submitted["job"] is mode.job and submitted["staging"].uri == str(tmp_path / "staging" / "try-1")
    assert ti.xcom["spark_submission_id"] == "driver-1"
    _finish_driver(tmp_path / "staging" / "try-1", {"steps": 3})
    assert mode.poll_until_complete(record, {"ti": ti}) == {"steps": 3}
    assert mode.get_job_result(record, {"ti": ti}) == {"steps": 3}  # from the wait, not read again
    assert ti.xcom["artifact_dir"] == str(tmp_path / "art") and ti.xcom["spark_app_id"] == "app-1"


class Deferred(Exception):
    """What the operator's ``defer`` raises (Airflow's ``TaskDeferred``)."""


def _defer(**kwargs: Any) -> None:
    raise Deferred(kwargs)


@pytest.mark.parametrize("gateway", [False, True])
def test_deferrable_cluster_mode_hands_the_driver_to_the_trigger(tmp_path, gateway):
    hook = FakeStandaloneHook("RUNNING")
    hook.uses_gateway = gateway  # the connection has the RPC secret: spark-submit's gateway, the master's web UI
    mode = _cluster(tmp_path, hook, deferrable=True, defer=_defer)
    record = mode.submit_job({"ti": FakeTI()})
    assert record["deferred"] is True
    with pytest.raises(Deferred) as raised:
        mode.poll_until_complete(record, {"ti": FakeTI()})
    deferred = raised.value.args[0]
    trigger = deferred["trigger"]
    assert (trigger.submission_id, trigger.rest_url, trigger.staging, trigger.conn_id) == (
        "driver-1",
        "http://127.0.0.1:6066",
        str(tmp_path / "staging" / "try-1"),
        "spark_cluster",
    )
    assert trigger.serialize()[1]["conn_id"] == "spark_cluster"  # the triggerer reads the token from it
    assert trigger.master_ui_url == ("http://127.0.0.1:8080" if gateway else None)  # where it reads the state
    assert deferred["method_name"] == "execute_complete"


def test_a_cleared_try_s_driver_is_abandoned_and_a_crashed_one_reattached(tmp_path):
    deferred_record = _cluster(tmp_path, FakeStandaloneHook("RUNNING"), deferrable=True, defer=_defer).submit_job(
        {"ti": FakeTI()}
    )
    retry = _cluster(tmp_path, FakeStandaloneHook("RUNNING"))
    assert retry.get_job_status(deferred_record, {"ti": FakeTI(try_number=2)}) == ABANDONED
    sync_record = {**deferred_record, "deferred": False}
    assert retry.get_job_status(sync_record, {"ti": FakeTI(try_number=2)}) == "RUNNING"  # a crash: reattach
    (tmp_path / "staging" / "try-1" / KILL_MARKER).write_text("{}")  # what on_kill wrote before killing
    assert retry.get_job_status(sync_record, {"ti": FakeTI(try_number=2)}) == ABANDONED


def test_on_kill_records_the_kill_before_it_kills_and_the_error_says_the_task_killed_it(tmp_path):
    hook, ti = FakeStandaloneHook("RUNNING", "KILLED"), FakeTI()
    mode = _cluster(tmp_path, hook)
    record = mode.submit_job({"ti": ti})
    mode._adopt(record, {"ti": ti})
    mode.on_kill()
    assert hook.killed == ["driver-1"]
    assert json.loads((tmp_path / "staging" / "try-1" / KILL_MARKER).read_text())["submission_id"] == "driver-1"
    with pytest.raises(HorovodJobError, match=r"^Spark driver driver-1 was killed by this task \(on_kill"):
        mode.poll_until_complete(record, {"ti": ti})


def test_resuming_after_the_trigger_reads_the_event_and_names_a_kill_from_outside(tmp_path):
    staging = tmp_path / "staging" / "try-1"
    staging.mkdir(parents=True)
    _finish_driver(staging, None, status="failed", message="Py4JNetworkError: Answer from Java side is empty")
    hook = FakeStandaloneHook("KILLED", killed_headline="Spark driver driver-1 was KILLED from outside this task")
    mode = ClusterMode(None, hook, _reporter([]))  # execute_complete: no new job
    event = {
        "status": "failed",
        "submission_id": "driver-1",
        "driver_state": "KILLED",
        "app_id": "app-1",
        "ui_url": "http://127.0.0.1:4041",
        "message": None,
        "staging": str(staging),
    }
    ti = FakeTI()
    with pytest.raises(HorovodJobError) as raised:
        mode.complete({"ti": ti}, event)
    assert str(raised.value).splitlines()[0] == "Spark driver driver-1 was KILLED from outside this task"
    assert "a consequence of the kill: Py4JNetworkError" in str(raised.value)
    assert (ti.xcom["spark_app_id"], ti.xcom["spark_ui_url"]) == ("app-1", "http://127.0.0.1:4041")
    assert mode.reporter.spark_ui_url == "http://127.0.0.1:4041"  # what the Spark UI link shows


def test_a_failed_trigger_kills_the_driver_named_in_xcom(tmp_path):
    hook, ti = FakeStandaloneHook("RUNNING"), FakeTI()
    ti.xcom_push("spark_submission_id", "driver-7")
    ClusterMode(None, hook, _reporter([])).kill_after_trigger_failure({"ti": ti})
    assert hook.killed == ["driver-7"]


@pytest.mark.parametrize(
    "master", ["spark://m:7077", "spark://m1:7077,m2:7077", "m", "localhost", "yarn-rm.example.com"]
)
def test_cluster_mode_runs_on_a_standalone_master_a_bare_host_included(master):
    assert cluster_manager(master, conn_id="c") == "standalone"


@pytest.mark.parametrize(
    ("master", "name"),
    [
        ("yarn", "YARN"),
        ("k8s://https://k:443", "Kubernetes"),
        ("mesos://m:5050", "Mesos"),
        ("local[4]", "a local master"),
    ],
)
def test_cluster_mode_on_another_cluster_manager_s_master_is_refused_naming_it(monkeypatch, master, name):
    """Picked by deploy mode and master URL: client mode stays open on those masters."""
    monkeypatch.setenv(
        "AIRFLOW_CONN_OTHER_MASTER",
        json.dumps({"conn_type": "spark", "host": master, "extra": {"deploy-mode": "cluster"}}),
    )
    refused = rf"^connection 'other_master': cluster deploy mode submits to a Spark standalone master .* is {name};"
    with pytest.raises(HorovodJobError, match=refused):
        resolve_deploy_mode(conn_id="other_master", deploy_mode=None, np=2)
    with pytest.raises(HorovodJobError, match=refused):
        resolve_deploy_mode(conn_id="other_master", deploy_mode="cluster", np=2)
    assert resolve_deploy_mode(conn_id="other_master", deploy_mode="client", np=2) == "client"
