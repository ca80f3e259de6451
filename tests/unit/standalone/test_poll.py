"""
The one per-poll decision both cluster-mode waits share (``read_poll``): the task's own loop
(``ClusterMode._wait_for_driver``) and the deferral trigger (``HorovodSparkJobTrigger.run``). Against the real
hook and the real REST clients, with the master's REST submission server faked by ``httpx.MockTransport``.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from airflow_provider_horovod.clients import SparkRestError
from airflow_provider_horovod.operators._reporting import JobReporter
from airflow_provider_horovod.operators.modes.cluster import ClusterMode, ClusterOptions
from airflow_provider_horovod.standalone.hook import HorovodStandaloneHook
from airflow_provider_horovod.standalone.poll import (
    EVENT_KEYS,
    DriverPoll,
    driver_failure,
    read_app,
    read_poll,
    read_result,
    validate_event,
)
from airflow_provider_horovod.triggers.horovod import HorovodSparkJobTrigger
from airflow_provider_horovod.utils.staging import Staging

LOG = logging.getLogger("test_poll")


def _master(
    states: list[str | int], message: str | None = None
) -> tuple[Callable[[httpx.Request], httpx.Response], list[str]]:
    """
    A REST submission server answering ``status/driver-1`` with ``states`` in order (the last one sticking); an int
    is an HTTP error status. Returns the handler and the paths it was asked.
    """
    asked: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        asked.append(request.url.path)
        assert request.url.path == "/v1/submissions/status/driver-1"
        state = states.pop(0) if len(states) > 1 else states[0]
        if isinstance(state, int):
            return httpx.Response(state, json={"action": "ErrorResponse", "message": "no such submission"})
        body = {
            "action": "SubmissionStatusResponse",
            "success": True,
            "submissionId": "driver-1",
            "driverState": state,
            "serverSparkVersion": "4.2.0",
        }
        if message is not None:
            body["message"] = message
        return httpx.Response(200, json=body)

    return handler, asked


@pytest.fixture
def hook_for(monkeypatch) -> Callable[..., HorovodStandaloneHook]:
    """The real standalone hook on a connection to 127.0.0.1 (its web UI on a closed port), REST calls faked."""
    monkeypatch.setenv(
        "AIRFLOW_CONN_FAKE_STANDALONE",
        json.dumps(
            {
                "conn_type": "spark",
                "host": "spark://127.0.0.1",
                "port": 7077,
                "extra": {
                    "deploy-mode": "cluster",
                    "spark.airflowProviderHorovod.restPort": 6066,
                    "spark.airflowProviderHorovod.uiPort": 1,
                },
            }
        ),
    )

    def make(handler: Callable[[httpx.Request], httpx.Response]) -> HorovodStandaloneHook:
        return HorovodStandaloneHook(conn_id="fake_standalone", timeout_s=5, transport=httpx.MockTransport(handler))

    return make


def _app_started(staging: Path, ui_url: str | None = "http://127.0.0.1:4041") -> None:
    """What the driver program writes once the Spark application exists."""
    (staging / "status.json").write_text(json.dumps({"app_id": "app-1", "ui_url": ui_url}))


def _poll(hook: HorovodStandaloneHook, staging: Path, last: DriverPoll | None) -> DriverPoll:
    """One poll as both loops make it: the master's answer (or its error), what staging holds, the previous poll."""
    try:
        status: Any = hook.status("driver-1")
    except SparkRestError as err:
        status = err
    app = last.app if last is not None and last.app_id else read_app(Staging(str(staging)))
    return read_poll("driver-1", status, app, last)


@pytest.mark.parametrize(
    ("state", "outcome"),
    [
        ("SUBMITTED", "running"),
        ("RUNNING", "running"),
        ("RELAUNCHING", "running"),
        ("UNKNOWN", "running"),
        ("FINISHED", "success"),
        ("FAILED", "failed"),
        ("KILLED", "failed"),
        ("ERROR", "failed"),
    ],
)
def test_each_driver_state_means_running_finished_or_failed(tmp_path, hook_for, state, outcome):
    handler, asked = _master([state])
    poll = _poll(hook_for(handler), tmp_path, None)
    assert asked == ["/v1/submissions/status/driver-1"]
    assert (poll.outcome, poll.driver_state, poll.done) == (outcome, state, outcome != "running")
    assert poll.state_changed and not poll.app_started and poll.app == (None, None)
    if outcome == "running":
        with pytest.raises(ValueError, match="still"):
            poll.event(str(tmp_path))
    else:
        assert validate_event(poll.event(str(tmp_path)))["status"] == outcome


def test_a_run_of_polls_says_what_changed_and_ends_with_the_event(tmp_path, hook_for):
    hook = hook_for(_master(["SUBMITTED", "RUNNING", "RUNNING", "FINISHED"])[0])
    polls, last = [], None
    for step in range(4):
        if step == 1:
            _app_started(tmp_path)
        last = _poll(hook, tmp_path, last)
        polls.append(last)
    assert [p.driver_state for p in polls] == ["SUBMITTED", "RUNNING", "RUNNING", "FINISHED"]
    assert [p.state_changed for p in polls] == [True, True, False, True]
    assert [p.app_started for p in polls] == [False, True, False, False]  # reported once
    assert [p.done for p in polls] == [False, False, False, True]
    (tmp_path / "status.json").unlink()  # once known, the application stays known
    assert polls[-1].app == ("app-1", "http://127.0.0.1:4041")
    event = polls[-1].event(str(tmp_path))
    assert set(event) == EVENT_KEYS
    assert event == {
        "status": "success",
        "submission_id": "driver-1",
        "driver_state": "FINISHED",
        "app_id": "app-1",
        "ui_url": "http://127.0.0.1:4041",
        "message": None,
        "staging": str(tmp_path),
    }


def test_a_failed_driver_s_event_carries_the_master_s_message_and_the_same_cause_as_the_hook_s_result(
    tmp_path, hook_for
):
    hook = hook_for(_master(["ERROR"], message="java.io.FileNotFoundException: horovod_driver.py")[0])
    poll = _poll(hook, tmp_path, None)
    event = poll.event(str(tmp_path))
    assert (event["status"], event["driver_state"]) == ("failed", "ERROR")
    assert event["message"] == "java.io.FileNotFoundException: horovod_driver.py"
    assert str(driver_failure(event["driver_state"], event["message"])) == (
        "driver state ERROR: java.io.FileNotFoundException: horovod_driver.py"
    )
    from airflow_provider_horovod.exceptions import HorovodJobError

    with pytest.raises(HorovodJobError) as raised:  # no result.json: the driver never ran the job
        read_result(Staging(str(tmp_path)), hook.status("driver-1"))
    assert str(raised.value.__cause__) == str(driver_failure(event["driver_state"], event["message"]))


def test_an_unreadable_state_ends_the_wait_failed_with_the_last_state_read(tmp_path, hook_for):
    hook = hook_for(_master(["RUNNING", 404])[0])
    _app_started(tmp_path)
    first = _poll(hook, tmp_path, None)
    with pytest.raises(SparkRestError):  # the task's own wait lets it raise
        hook.status("driver-1")
    second = _poll(hook, tmp_path, first)
    assert not first.done and second.done and not second.state_changed and not second.app_started
    event = second.event(str(tmp_path))
    assert (event["status"], event["driver_state"], event["app_id"]) == ("failed", "RUNNING", "app-1")
    assert event["message"].startswith("cannot read driver driver-1's state: ")


class _TI:
    def __init__(self) -> None:
        self.xcom: dict[str, Any] = {}

    def xcom_push(self, key: str, value: Any) -> None:
        self.xcom[key] = value


def test_the_task_s_wait_and_the_trigger_read_the_same_answers_alike(tmp_path, hook_for, caplog):
    """The same master answers and staging, through both loops: the same states logged, the same ending."""
    states = ["SUBMITTED", "RUNNING", "RUNNING", "KILLED"]
    _app_started(tmp_path, ui_url=None)  # no live UI: neither loop polls progress

    handler, asked = _master(list(states))
    mode = ClusterMode(
        None,
        hook_for(handler),
        JobReporter(
            log=LOG, conn_id=None, poll_interval_s=None, max_return_value_bytes=1024, publish_link=lambda ti, url: None
        ),
        ClusterOptions(poll_interval_s=0.01),
    )
    ti = _TI()
    with caplog.at_level(logging.INFO):
        status = mode._wait_for_driver(ti, "driver-1", Staging(str(tmp_path)))
    sync_logged = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Driver driver-1 is")]
    assert status.driver_state == "KILLED" and len(asked) == 4
    assert ti.xcom["spark_app_id"] == "app-1"
    caplog.clear()

    handler, asked = _master(list(states))
    trigger = HorovodSparkJobTrigger(
        submission_id="driver-1",
        rest_url="http://127.0.0.1:6066",
        staging=str(tmp_path),
        poll_interval_s=0.01,
        timeout_s=5,
    )
    trigger._log = logging.getLogger("test_poll.trigger")  # a stdlib logger, for caplog
    trigger.hook.transport = httpx.MockTransport(handler)  # the same answers, through the trigger's own hook

    async def first_event():
        return await trigger.run().__anext__()

    with caplog.at_level(logging.INFO):
        event = asyncio.run(asyncio.wait_for(first_event(), timeout=30))
    async_logged = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Driver driver-1 is")]
    assert len(asked) == 4
    assert (
        sync_logged
        == async_logged
        == ["Driver driver-1 is SUBMITTED", "Driver driver-1 is RUNNING", "Driver driver-1 is KILLED"]
    )
    assert any(r.getMessage() == "Spark application app-1 started; Spark UI: None" for r in caplog.records)
    assert event.payload == {
        "status": "failed",
        "submission_id": "driver-1",
        "driver_state": "KILLED",
        "app_id": "app-1",
        "ui_url": None,
        "message": None,
        "staging": str(tmp_path),
    }


def test_the_progress_log_logs_new_snapshots_at_most_every_interval():
    import json

    from airflow_provider_horovod.standalone.poll import ProgressLog

    now = [0.0]
    log = ProgressLog(interval_s=5.0, clock=lambda: now[0])

    def snap(at, step):
        return json.dumps(
            {
                "time": at,
                "started_at": 0.0,
                "state": "running",
                "step": step,
                "total_steps": None,
                "metrics": {},
                "steps_per_s": None,
            }
        ).encode()

    assert log.line(None) is None and log.line(b"{half") is None
    assert log.line(snap(1.0, 10)).startswith("step 10")
    now[0] = 2.0
    assert log.line(snap(2.0, 20)) is None  # too soon
    now[0] = 6.0
    assert log.line(snap(2.0, 20)).startswith("step 20")
    now[0] = 12.0
    assert log.line(snap(2.0, 20)) is None  # nothing new


def test_the_progress_log_says_once_and_at_once_that_the_try_resumed_from_a_checkpoint():
    import json

    from airflow_provider_horovod.standalone.poll import ProgressLog

    log = ProgressLog(interval_s=5.0, clock=lambda: 0.0)
    resumed = {"step": 10, "try_number": 2, "saved_by": 1, "location": "/ckpt/step-000000000010.json"}
    snapshot = json.dumps({"time": 1.0, "state": "running", "step": None, "metrics": {}, "resumed": resumed}).encode()
    assert log.line(snapshot) == (
        "resuming from checkpoint step 10 (try 2), saved by try 1, from /ckpt/step-000000000010.json"
    )
    assert log.line(snapshot) is None  # once; and no progress line for a snapshot without steps


def test_the_progress_log_says_each_restart_within_the_try_at_once_and_the_resume_after_it():
    """A cluster-mode wait (sync, or the trigger while deferred) logs the driver's restarts (max_restarts, issue #36)
    from its snapshot, as the driver prints them, then where the restarted attempt resumed from."""
    import json

    from airflow_provider_horovod.runtime.driver.restarts import RestartBudget
    from airflow_provider_horovod.runtime.errors import ExecutorLostError
    from airflow_provider_horovod.standalone.poll import ProgressLog

    budget = RestartBudget(3)
    lost = ExecutorLostError("lost", executor="1", host="10.0.0.7", rank=1, reason="Command exited with code 137")
    first = budget.next_restart(lost, step=812)
    log = ProgressLog(interval_s=5.0, clock=lambda: 0.0)

    def snap(time_, restarts, resumed=None):
        return json.dumps(
            {"time": time_, "state": "running", "step": None, "metrics": {}, "resumed": resumed, "restarts": restarts}
        ).encode()

    line = log.line(snap(1.0, [first.to_dict()]))
    assert (
        line
        == first.line()
        == (
            "restart 1/3: executor 1 on 10.0.0.7 lost (Command exited with code 137), holding rank 1 at step 812; "
            "starting again now"
        )
    )
    assert log.line(snap(2.0, [first.to_dict()])) is None  # once
    resumed = {"step": 800, "try_number": 1, "saved_by": 1, "location": "/ckpt/step-000000000800.json"}
    assert log.line(snap(3.0, [first.to_dict()], resumed)).startswith("resuming from checkpoint step 800 (try 1)")
    second, third = budget.next_restart(lost, step=900), budget.next_restart(lost, step=None)
    lines = log.line(snap(4.0, [first.to_dict(), second.to_dict(), third.to_dict()])).splitlines()
    assert [x.split(":")[0] for x in lines] == ["restart 2/3", "restart 3/3"] and lines[1].endswith("again in 2 s")
    assert " at step" not in lines[1]  # the attempt never reported a step


def test_a_restart_from_before_the_wait_began_is_told_as_such_not_as_happening_now():
    """A retry that reattached to the running driver (or a trigger run again) reads restarts that happened before its
    wait began: it says so, with the time, instead of "starting again now"; later ones are told as they happen."""
    import datetime
    import json

    from airflow_provider_horovod.runtime.driver.restarts import RestartBudget
    from airflow_provider_horovod.runtime.errors import ExecutorLostError
    from airflow_provider_horovod.runtime.wire.progress_format import restart_line
    from airflow_provider_horovod.standalone.poll import ProgressLog

    budget = RestartBudget(2)
    lost = ExecutorLostError("lost", executor="1", host="10.0.0.7", rank=1, reason="Command exited with code 137")
    first = budget.next_restart(lost, step=812)
    log = ProgressLog(clock=lambda: 0.0, since=first.at + 60)  # this wait began a minute after the restart

    def snap(time_, restarts):
        return json.dumps({"time": time_, "state": "running", "restarts": restarts}).encode()

    clock = datetime.datetime.fromtimestamp(first.at, datetime.UTC)
    assert log.line(snap(1.0, [first.to_dict()])) == (
        f"restart 1/2 happened before this wait began (at {clock:%H:%M:%S} UTC): executor 1 on 10.0.0.7 lost "
        "(Command exited with code 137), holding rank 1 at step 812"
    )
    later = {**budget.next_restart(lost, step=900).to_dict(), "at": first.at + 120}
    assert log.line(snap(2.0, [first.to_dict(), later])) == restart_line(later)  # after the wait began: as it is
    # a fresh wait's first snapshot: a restart after its start, or one without a usable time, is told as it happens
    assert ProgressLog(since=first.at - 60).line(snap(1.0, [first.to_dict()])) == first.line()
    assert ProgressLog(since=first.at + 60).line(snap(1.0, [{**first.to_dict(), "at": None}])) == first.line()
