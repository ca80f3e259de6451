"""
The Spark REST clients (airflow_provider_horovod.clients): the parser on payloads recorded from a real standalone
master and a real application UI (tests/unit/data/spark_rest, written by
``SPARK_REST_RECORD=1 pytest tests/integration/test_standalone_cluster.py``), and the retry, error and timeout
behaviour over ``httpx.MockTransport`` and over real local sockets (refused, silent).
"""

from __future__ import annotations

import asyncio
import json
import logging
import pickle
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import ValidationError

from airflow_provider_horovod.clients import (
    ApplicationInfo,
    AsyncSparkRestClient,
    DriverStatus,
    ExecutorInfo,
    JobInfo,
    MasterState,
    RetryPolicy,
    SparkRestClient,
    SparkRestError,
    SparkRestPayloadError,
    SparkRestUnavailableError,
    SparkSubmissionError,
    StageInfo,
    SubmissionResponse,
)
from airflow_provider_horovod.clients._spark_model import parse_list

DATA = Path(__file__).resolve().parents[1] / "data" / "spark_rest"
UI, MASTER, REST = "http://spark-ui.test:4040", "http://spark-master.test:8080", "http://spark-master.test:6066"
FAST = RetryPolicy(max_attempts=4, initial_backoff_s=0.01, max_backoff_s=0.02)


def load(name: str) -> Any:
    return json.loads((DATA / f"{name}.json").read_text())


# --- the parser, on recorded payloads ---------------------------------------------------------------------------


def test_applications_recorded_from_a_live_driver_ui():
    raw = load("applications")
    (app,) = [ApplicationInfo.from_json(a) for a in raw]
    assert app.id.startswith("app-") and app.name == "rest-tracked-app"
    attempt = app.latest_attempt
    assert raw[0]["attempts"][0]["endTimeEpoch"] == -1 and attempt.end_time_epoch_ms is None
    assert not app.completed and not attempt.completed and attempt.start_time_epoch_ms > 0
    assert attempt.spark_user and attempt.app_spark_version.startswith("4.")


def test_jobs_count_completed_tasks_in_numCompletedTasks():
    raw = load("jobs")
    jobs = {j.status: j for j in map(JobInfo.from_json, raw)}
    assert set(jobs) == {"SUCCEEDED", "FAILED", "RUNNING"}
    assert all("numCompletedTasks" in r and "numCompleteTasks" not in r for r in raw)
    for record, job in zip(raw, map(JobInfo.from_json, raw), strict=True):
        assert job.num_completed_tasks == record["numCompletedTasks"]
    done, failed, running = jobs["SUCCEEDED"], jobs["FAILED"], jobs["RUNNING"]
    assert done.num_completed_tasks == done.num_tasks == 2 and done.is_terminal and done.completion_time
    assert failed.num_failed_tasks >= 1 and failed.num_failed_stages == 1 and failed.is_terminal
    assert running.num_active_tasks == 1 and running.num_active_stages == 1 and not running.is_terminal
    assert running.completion_time is None and running.stage_ids


def test_stages_count_completed_tasks_in_numCompleteTasks_and_keep_the_failure_reason():
    raw = load("stages")
    stages = {s.status: s for s in map(StageInfo.from_json, raw)}
    assert set(stages) == {"COMPLETE", "FAILED", "ACTIVE"}
    assert all("numCompleteTasks" in r and "numCompletedTasks" not in r for r in raw)
    for record, stage in zip(raw, map(StageInfo.from_json, raw), strict=True):
        assert stage.num_completed_tasks == record["numCompleteTasks"]
        assert stage.attempt_id == record["attemptId"] == 0
    assert stages["COMPLETE"].num_completed_tasks == 2 and stages["COMPLETE"].failure_reason is None
    failed = stages["FAILED"]
    assert "ValueError: deliberate failure for the Spark REST test" in failed.failure_reason
    assert failed.is_terminal and failed.num_failed_tasks >= 1
    assert stages["ACTIVE"].num_active_tasks == 1 and not stages["ACTIVE"].is_terminal


def test_job_and_stage_parsers_do_not_take_each_others_task_count():
    job, stage = load("jobs")[0], load("stages")[0]
    job["numCompleteTasks"] = job.pop("numCompletedTasks")  # a job shaped like a stage
    stage["numCompletedTasks"] = stage.pop("numCompleteTasks")  # and the other way round
    with pytest.raises(SparkRestPayloadError, match="JobInfo: field 'numCompletedTasks' is missing"):
        JobInfo.from_json(job)
    with pytest.raises(SparkRestPayloadError, match="StageInfo: field 'numCompleteTasks' is missing"):
        StageInfo.from_json(stage)


def test_executors_list_the_driver_and_the_executor():
    executors = [ExecutorInfo.from_json(e) for e in load("executors")]
    driver = next(e for e in executors if e.is_driver)
    (executor,) = (e for e in executors if not e.is_driver)
    assert driver.total_cores == 0 and "driverId=driver-" in driver.executor_logs["stdout"]
    assert executor.total_cores == 1 and executor.active_tasks == 1 and executor.is_active
    assert executor.host_port.startswith("127.0.0.1:") and "logType=stderr" in executor.executor_logs["stderr"]
    assert executor.resources == {} and executor.remove_reason is None and executor.max_memory_bytes > 0


def test_executor_resources_are_name_to_addresses():
    raw = {**load("executors")[0], "resources": {"gpu": {"name": "gpu", "addresses": ["0", "1"]}}}
    executor = ExecutorInfo.from_json(raw)
    assert executor.resources == {"gpu": ("0", "1")}
    assert executor.to_dict()["resources"] == raw["resources"]


def test_master_state_while_an_application_runs():
    raw = load("master_state_running")
    state = MasterState.from_json(raw)
    assert state.status == "ALIVE" and state.url.startswith("spark://127.0.0.1:")
    assert state.alive_workers == len(state.workers) == 2 and {w.state for w in state.workers} == {"ALIVE"}
    assert state.cores == 4 and state.cores_used >= 2
    (app,) = state.active_apps
    assert app.state == "RUNNING" and app.cores == 1 and app.memory_per_executor_mb == 512
    assert state.application(app.id) is app and state.application("app-nope") is None
    (driver,) = state.active_drivers
    # The master writes a driver's start time as a string, an application's as a number.
    assert isinstance(raw["activedrivers"][0]["starttime"], str) and isinstance(raw["activeapps"][0]["starttime"], int)
    assert driver.start_time_ms == int(raw["activedrivers"][0]["starttime"])
    assert driver.state == "RUNNING" and driver.main_class == "org.apache.spark.deploy.PythonRunner"
    assert driver.worker_id in {w.id for w in state.workers} and state.driver(driver.id) is driver


def test_master_state_after_the_kill():
    state = MasterState.from_json(load("master_state_completed"))
    assert not state.active_apps and not state.active_drivers
    (app,) = state.completed_apps
    (driver,) = state.completed_drivers
    assert app.state == "FINISHED" and driver.state == "KILLED" and state.cores_used == 0


@pytest.mark.parametrize(
    ("name", "state", "terminal", "successful", "active"),
    [
        ("submission_status_running", "RUNNING", False, False, True),
        ("submission_status_finished", "FINISHED", True, True, False),
        ("submission_status_failed", "FAILED", True, False, False),
        ("submission_status_killed", "KILLED", True, False, False),
        ("submission_status_error", "ERROR", True, False, False),
    ],
)
def test_driver_status_states(name, state, terminal, successful, active):
    status = DriverStatus.from_json(load(name))
    assert status.success and status.driver_state == state
    assert (status.is_terminal, status.is_successful, status.is_active) == (terminal, successful, active)
    assert status.is_failed == (terminal and not successful) and not status.is_transient
    assert status.submission_id.startswith("driver-") and status.worker_id.startswith("worker-")
    assert status.worker_host_port.startswith("127.0.0.1:")


def test_error_driver_status_carries_the_exception():
    status = DriverStatus.from_json(load("submission_status_error"))
    assert "NoSuchFileException" in status.message and "missing.py" in status.message


@pytest.mark.parametrize(
    ("state", "terminal", "active", "transient"),
    [
        ("SUBMITTED", False, True, False),
        ("RELAUNCHING", False, True, False),
        ("UNKNOWN", False, False, True),
        ("SOMETHING_NEW", False, False, False),
    ],
)
def test_driver_states_not_recorded(state, terminal, active, transient):
    status = DriverStatus.from_json({**load("submission_status_running"), "driverState": state})
    assert (status.is_terminal, status.is_active, status.is_transient) == (terminal, active, transient)
    assert not status.is_successful


def test_unknown_submission_has_no_state():
    status = DriverStatus.from_json(load("submission_status_unknown"))
    assert not status.success and status.driver_state is None and not status.is_terminal


def test_submission_responses():
    created = SubmissionResponse.from_json(load("submission_create"))
    assert created.success and created.submission_id.startswith("driver-") and created.server_spark_version
    kill = SubmissionResponse.from_json(load("submission_kill"))
    assert kill.success and "Kill request" in kill.message
    unknown = SubmissionResponse.from_json(load("submission_kill_unknown"))
    assert not unknown.success and "does not exist" in unknown.message


RECORDS = [
    ("applications", ApplicationInfo, True),
    ("jobs", JobInfo, True),
    ("stages", StageInfo, True),
    ("executors", ExecutorInfo, True),
    ("master_state_running", MasterState, False),
    ("master_state_completed", MasterState, False),
    ("submission_status_error", DriverStatus, False),
    ("submission_create", SubmissionResponse, False),
]


@pytest.mark.parametrize(("name", "cls", "many"), RECORDS)
def test_to_dict_round_trips_through_json(name, cls, many):
    raw = load(name)
    for item in raw if many else [raw]:
        value = cls.from_json(item)
        assert cls.from_json(json.loads(json.dumps(value.to_dict()))) == value


def test_unknown_fields_are_ignored_and_wrong_types_rejected():
    job = load("jobs")[0]
    assert JobInfo.from_json({**job, "aFieldOfSpark9": [1, 2]}) == JobInfo.from_json(job)
    with pytest.raises(SparkRestPayloadError, match="'numTasks' should be an integer"):
        JobInfo.from_json({**job, "numTasks": "two"})
    with pytest.raises(SparkRestPayloadError, match="'isActive' should be a boolean"):
        ExecutorInfo.from_json({**load("executors")[0], "isActive": "yes"})
    with pytest.raises(SparkRestPayloadError, match="expected a JSON object"):
        MasterState.from_json([])
    with pytest.raises(SparkRestPayloadError, match="MasterState.workers"):
        MasterState.from_json({**load("master_state_running"), "workers": {"not": "a list"}})


def test_nested_and_element_errors_name_their_path():
    state = load("master_state_running")
    worker = {k: v for k, v in state["workers"][0].items() if k != "id"}
    with pytest.raises(SparkRestPayloadError, match=r"^MasterState\.workers\[1\]: field 'id' is missing"):
        MasterState.from_json({**state, "workers": [state["workers"][0], worker]})
    with pytest.raises(SparkRestPayloadError, match=r"^JobInfo\.stageIds\[1\]: should be an integer, got '7'"):
        JobInfo.from_json({**load("jobs")[0], "stageIds": [3, "7"]})
    with pytest.raises(
        SparkRestPayloadError, match=r"^ExecutorInfo: field 'totalCores' should be an integer, got True"
    ):
        ExecutorInfo.from_json({**load("executors")[0], "totalCores": True})
    with pytest.raises(SparkRestPayloadError, match=r"^jobs: expected a JSON array, got dict"):
        parse_list(JobInfo, {"jobs": []}, "jobs")


def test_spark_json_conventions():
    job = load("jobs")[0]
    # null is absent: optional fields are None, collections empty; a required one is missing
    nulls = JobInfo.from_json({**job, "description": None, "stageIds": None, "jobTags": None})
    assert nulls.description is None and nulls.stage_ids == () and nulls.job_tags == ()
    with pytest.raises(SparkRestPayloadError, match="JobInfo: field 'numTasks' is missing"):
        JobInfo.from_json({**job, "numTasks": None})
    # integral strings are integers (the master's driver start time), numbers are strings (ids)
    assert JobInfo.from_json({**job, "numTasks": "12", "name": 42}).num_tasks == 12
    assert JobInfo.from_json({**job, "name": 42}).name == "42"
    # fields can also be given by name
    assert JobInfo(**JobInfo.from_json(job).model_dump()) == JobInfo.from_json(job)


def test_value_objects_are_frozen_and_hashable():
    job = JobInfo.from_json(load("jobs")[0])
    with pytest.raises(ValidationError, match="frozen"):
        job.status = "FAILED"  # type: ignore[misc]
    assert hash(job) == hash(JobInfo.from_json(load("jobs")[0]))
    # the dict fields (executor logs, resources) stay out of the hash but not out of equality
    executor = ExecutorInfo.from_json(load("executors")[0])
    other = ExecutorInfo.from_json({**load("executors")[0], "executorLogs": {}})
    assert hash(executor) == hash(other) and executor != other
    assert len({executor, other, ExecutorInfo.from_json(load("executors")[0])}) == 2


# --- the clients over httpx.MockTransport -------------------------------------------------------------------------


class Script:
    """A MockTransport handler answering from a list of responses (or exceptions), recording every request."""

    def __init__(self, *answers: httpx.Response | Exception | Callable[[httpx.Request], httpx.Response]) -> None:
        self.answers = list(answers)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        return answer(request) if callable(answer) else answer


def sync_client(script: Script, retry: RetryPolicy = FAST, **kwargs: Any) -> SparkRestClient:
    return SparkRestClient(
        ui_url=UI, master_ui_url=MASTER, rest_url=REST, retry=retry, transport=httpx.MockTransport(script), **kwargs
    )


def run_async(script: Script, call: Callable[[AsyncSparkRestClient], Any], retry: RetryPolicy = FAST) -> Any:
    async def main():
        async with AsyncSparkRestClient(
            ui_url=UI, master_ui_url=MASTER, rest_url=REST, retry=retry, transport=httpx.MockTransport(script)
        ) as client:
            return await call(client)

    return asyncio.run(main())


def ok(name: str) -> httpx.Response:
    return httpx.Response(200, json=load(name))


def test_503_twice_then_200_succeeds():
    script = Script(httpx.Response(503), httpx.Response(503, text="busy"), ok("jobs"))
    with sync_client(script) as client:
        jobs = client.jobs("app-1")
    assert [j.job_id for j in jobs] == [j["jobId"] for j in load("jobs")] and len(script.requests) == 3
    assert str(script.requests[0].url) == f"{UI}/api/v1/applications/app-1/jobs"


def test_503_twice_then_200_succeeds_async():
    script = Script(httpx.Response(503), httpx.Response(502), ok("stages"))
    stages = run_async(script, lambda c: c.stages("app-1", status="FAILED"))
    assert len(stages) == len(load("stages")) and len(script.requests) == 3
    assert script.requests[0].url.params["status"] == "failed"


def test_404_raises_at_once_with_the_status_code():
    script = Script(httpx.Response(404, text="unknown app: app-x"))
    with (
        sync_client(script, retry=RetryPolicy(max_attempts=5, initial_backoff_s=10)) as client,
        pytest.raises(SparkRestError) as info,
    ):
        client.executors("app-x")
    assert type(info.value) is SparkRestError and info.value.status_code == 404
    assert info.value.url == f"{UI}/api/v1/applications/app-x/executors" and "unknown app: app-x" in str(info.value)
    assert len(script.requests) == 1


def test_404_raises_at_once_async():
    script = Script(httpx.Response(404, text="no such app"))
    with pytest.raises(SparkRestError) as info:
        run_async(script, lambda c: c.application("app-x"), retry=RetryPolicy(max_attempts=5, initial_backoff_s=10))
    assert info.value.status_code == 404 and len(script.requests) == 1


@pytest.mark.parametrize(
    ("name", "status"), [("rest_error_unknown_version", 468), ("rest_error_malformed_create", 400)]
)
def test_rest_server_error_responses_give_the_server_message(name, status):
    body = load(name)
    script = Script(httpx.Response(status, json=body))
    with sync_client(script) as client, pytest.raises(SparkRestError) as info:
        client.driver_status("driver-1")
    assert info.value.status_code == status and body["message"].splitlines()[0] in str(info.value)
    assert len(script.requests) == 1


def test_5xx_until_the_last_attempt_raises_unavailable_with_the_status():
    script = Script(httpx.Response(500, text="boom"))
    with sync_client(script) as client, pytest.raises(SparkRestUnavailableError) as info:
        client.master_state()
    assert info.value.status_code == 500 and info.value.url == f"{MASTER}/json/" and "boom" in str(info.value)
    assert len(script.requests) == FAST.max_attempts


def test_connection_errors_are_retried_then_raised():
    script = Script(httpx.ConnectError("Connection refused"))
    with sync_client(script) as client, pytest.raises(SparkRestUnavailableError) as info:
        client.applications()
    assert info.value.status_code is None and isinstance(info.value.__cause__, httpx.ConnectError)
    assert len(script.requests) == FAST.max_attempts


def test_connection_errors_are_retried_then_succeed_async():
    script = Script(httpx.ConnectError("refused"), httpx.ReadError("reset"), ok("master_state_running"))
    state = run_async(script, lambda c: c.master_state())
    assert state.alive_workers == 2 and len(script.requests) == 3


def test_real_connection_refused_is_retried_then_raised(caplog):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again: nothing listens there
    caplog.set_level(logging.WARNING, logger="airflow_provider_horovod.clients.spark_rest_calls")
    with (
        SparkRestClient(ui_url=f"http://127.0.0.1:{port}", timeout_s=2, retry=FAST) as client,
        pytest.raises(SparkRestUnavailableError) as info,
    ):
        client.applications()
    assert isinstance(info.value.__cause__, httpx.ConnectError) and info.value.status_code is None
    assert len([r for r in caplog.records if "retrying in" in r.getMessage()]) == FAST.max_attempts - 1


def test_create_is_not_retried_once_the_request_may_have_arrived():
    for answer in (httpx.Response(503), httpx.ReadTimeout("slow"), httpx.RemoteProtocolError("cut")):
        script = Script(answer)
        with sync_client(script) as client, pytest.raises(SparkRestUnavailableError):
            client.create_submission(app_resource="file:/a.py", main_class="M")
        assert len(script.requests) == 1, answer


def test_create_is_retried_when_the_connection_failed():
    script = Script(httpx.ConnectError("refused"), httpx.ConnectTimeout("slow"), ok("submission_create"))
    with sync_client(script) as client:
        created = client.create_submission(app_resource="file:/a.py", main_class="M")
    assert created.submission_id == load("submission_create")["submissionId"] and len(script.requests) == 3


def test_kill_is_retried_on_5xx():
    script = Script(httpx.Response(503), ok("submission_kill"))
    response = run_async(script, lambda c: c.kill_submission("driver-1"))
    assert response.success and len(script.requests) == 2
    assert script.requests[0].method == "POST" and script.requests[0].url.path == "/v1/submissions/kill/driver-1"


def test_create_request_body():
    script = Script(ok("submission_create"))
    with sync_client(script) as client:
        client.create_submission(
            app_resource="file:/jobs/app.py",
            main_class="org.apache.spark.deploy.PythonRunner",
            app_args=["/jobs/app.py", ""],
            spark_properties={"spark.cores.max": 2},
            environment_variables={"PYSPARK_PYTHON": "/usr/bin/python3"},
        )
    (request,) = script.requests
    body = json.loads(request.content)
    assert request.url == f"{REST}/v1/submissions/create" and request.method == "POST"
    assert body == {
        "action": "CreateSubmissionRequest",
        "appResource": "file:/jobs/app.py",
        "mainClass": "org.apache.spark.deploy.PythonRunner",
        "appArgs": ["/jobs/app.py", ""],
        "sparkProperties": {"spark.cores.max": "2"},
        "environmentVariables": {"PYSPARK_PYTHON": "/usr/bin/python3"},
        "clientSparkVersion": body["clientSparkVersion"],
    }
    assert body["clientSparkVersion"][0].isdigit()


def test_create_refused_by_the_master_raises():
    refused = {**load("submission_create"), "success": False, "message": "Current state is not alive: STANDBY"}
    script = Script(httpx.Response(200, json=refused))
    with sync_client(script) as client, pytest.raises(SparkSubmissionError, match="STANDBY") as info:
        client.create_submission(app_resource="file:/a.py", main_class="M")
    assert info.value.status_code == 200 and info.value.url == f"{REST}/v1/submissions/create"


def test_status_of_an_unknown_submission_raises():
    script = Script(ok("submission_status_unknown"))
    with pytest.raises(SparkSubmissionError, match="does not know submission"):
        run_async(script, lambda c: c.driver_status("driver-does-not-exist"))


def test_ids_are_quoted_in_urls():
    script = Script(ok("submission_status_running"))
    with sync_client(script) as client:
        client.driver_status("driver/../x y")
    assert script.requests[0].url.raw_path == b"/v1/submissions/status/driver%2F..%2Fx%20y"


def test_a_body_that_is_not_json_is_a_payload_error():
    script = Script(httpx.Response(200, text="<html>Spark Master</html>"))
    with sync_client(script) as client, pytest.raises(SparkRestPayloadError) as info:
        client.master_state()
    assert info.value.status_code == 200 and info.value.url == f"{MASTER}/json/" and len(script.requests) == 1


def test_a_malformed_record_names_the_url_and_field():
    jobs = load("jobs")
    del jobs[0]["status"]
    script = Script(httpx.Response(200, json=jobs))
    with sync_client(script) as client, pytest.raises(SparkRestPayloadError, match="'status' is missing") as info:
        client.jobs("app-1")
    assert info.value.url == f"{UI}/api/v1/applications/app-1/jobs"


def test_other_request_errors_are_not_retried():
    script = Script(lambda request: httpx.Response(301, headers={"Location": str(request.url)}))
    with sync_client(script) as client, pytest.raises(SparkRestError, match="TooManyRedirects") as info:
        client.master_state()
    assert type(info.value) is SparkRestError and isinstance(info.value.__cause__, httpx.TooManyRedirects)
    assert len(script.requests) == 21  # httpx's 20 redirects, one attempt


def test_timeout_s_reaches_every_request():
    script = Script(ok("applications"))
    with sync_client(script, timeout_s=7) as client:
        client.applications()
        client.applications(timeout_s=1.5)
    assert script.requests[0].extensions["timeout"] == {"connect": 7, "read": 7, "write": 7, "pool": 7}
    assert script.requests[1].extensions["timeout"]["read"] == 1.5


def test_deadline_stops_retrying():
    script = Script(httpx.Response(503))
    policy = RetryPolicy(max_attempts=100, initial_backoff_s=0.2, max_backoff_s=0.2, deadline_s=0.5)
    started = time.monotonic()
    with sync_client(script, retry=policy) as client, pytest.raises(SparkRestUnavailableError):
        client.applications()
    assert 2 <= len(script.requests) <= 5 and time.monotonic() - started < 3


def test_configuration_errors():
    with pytest.raises(ValueError, match="without ui_url"):
        SparkRestClient(master_ui_url=MASTER).jobs("app-1")
    with pytest.raises(ValueError, match="without rest_url"):
        SparkRestClient(ui_url=UI).driver_status("driver-1")
    with pytest.raises(ValueError, match="timeout_s"):
        SparkRestClient(ui_url=UI, timeout_s=0)
    with pytest.raises(ValueError, match="max_attempts"):
        RetryPolicy(max_attempts=0)


def test_errors_survive_pickling():
    error = SparkRestUnavailableError("gone", status_code=503, url=f"{UI}/api/v1/applications")
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is SparkRestUnavailableError and (copy.status_code, copy.url) == (503, error.url)
    assert str(copy) == str(error) == f"gone [503 from {UI}/api/v1/applications]"


# --- timeouts against a real server that never answers ------------------------------------------------------------


@pytest.fixture
def silent_server() -> Iterator[tuple[str, list[socket.socket]]]:
    """A TCP server on 127.0.0.1 that accepts connections and never answers; yields its URL and the connections."""
    server = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            accepted.append(conn)

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.getsockname()[1]}", accepted
    server.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept() (close() alone does not on Linux)
    server.close()
    thread.join(timeout=5)
    assert not thread.is_alive()
    for conn in accepted:
        conn.close()


def test_timeouts_are_honored_and_retried_for_reads(silent_server):
    url, accepted = silent_server
    policy = RetryPolicy(max_attempts=2, initial_backoff_s=0.05)
    started = time.monotonic()
    with (
        SparkRestClient(ui_url=url, timeout_s=0.5, retry=policy) as client,
        pytest.raises(SparkRestUnavailableError, match="timed out") as info,
    ):
        client.applications()
    elapsed = time.monotonic() - started
    assert isinstance(info.value.__cause__, httpx.ReadTimeout) and info.value.status_code is None
    assert 1.0 <= elapsed < 4 and len(accepted) == 2


def test_timeouts_are_honored_async_and_create_is_not_repeated(silent_server):
    url, accepted = silent_server

    async def main():
        async with AsyncSparkRestClient(rest_url=url, timeout_s=0.5, retry=RetryPolicy(max_attempts=3)) as client:
            return await client.create_submission(app_resource="file:/a.py", main_class="M")

    started = time.monotonic()
    with pytest.raises(SparkRestUnavailableError, match="timed out"):
        asyncio.run(main())
    assert 0.5 <= time.monotonic() - started < 3 and len(accepted) == 1


def test_clients_import_no_airflow():
    code = (
        "import sys, airflow_provider_horovod.clients; "
        "bad = sorted(m for m in sys.modules if m == 'airflow' or m.startswith('airflow.')); "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
