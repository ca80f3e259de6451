"""The deferral trigger's contract: serialize round trip, argument and event validation."""

from __future__ import annotations

import pytest

from airflow_provider_horovod.triggers.horovod import HorovodSparkJobTrigger
from airflow_provider_horovod.standalone.poll import EVENT_KEYS, validate_event


def test_serialize_round_trip():
    trigger = HorovodSparkJobTrigger(submission_id="driver-20261130-0001", rest_url="http://m:6066",
                                     staging="/shared/.staging/d/r/t/try-1", poll_interval_s=2.5,
                                     cancel_on_kill=False, timeout_s=7)
    path, kwargs = trigger.serialize()
    assert path == "airflow_provider_horovod.triggers.horovod.HorovodSparkJobTrigger"
    assert kwargs == {"submission_id": "driver-20261130-0001", "rest_url": "http://m:6066",
                      "staging": "/shared/.staging/d/r/t/try-1", "poll_interval_s": 2.5, "cancel_on_kill": False,
                      "timeout_s": 7, "conn_id": None, "master_ui_url": None, "mlflow_conn_id": None,
                      "mlflow_run_id": None}
    assert HorovodSparkJobTrigger(**kwargs).serialize() == (path, kwargs)
    with_conn = HorovodSparkJobTrigger(**{**kwargs, "conn_id": "spark_secure"})
    assert with_conn.serialize()[1] == {**kwargs, "conn_id": "spark_secure"}  # the id only: the token stays put
    tracked = with_conn.with_mlflow_run("mlflow_default", "run-1")
    assert tracked.serialize()[1] == {**kwargs, "conn_id": "spark_secure", "mlflow_conn_id": "mlflow_default",
                                      "mlflow_run_id": "run-1"}  # the MLflow connection's id only, too


def test_poll_interval_must_be_positive():
    with pytest.raises(ValueError, match="poll_interval_s must be > 0 seconds"):
        HorovodSparkJobTrigger(submission_id="d", rest_url="http://m:6066", staging="/s", poll_interval_s=0)


def test_event_validation():
    event = {k: None for k in EVENT_KEYS} | {"status": "success", "submission_id": "driver-1", "staging": "/s"}
    assert validate_event(event) is event
    with pytest.raises(ValueError, match="expected the keys"):
        validate_event({"status": "success"})
    with pytest.raises(ValueError, match="expected 'success' or 'failed'"):
        validate_event(event | {"status": "running"})


class _FakeMaster:
    """
    A fake REST submission server on 127.0.0.1 answering ``answer(method, path) -> (status, json body)`` (a 503 storm
    or a triggerer's state lookup can't be produced on demand with a real master); it records the requests.
    """

    def __init__(self, answer):
        import http.server
        import json
        import threading

        self.requests: list[tuple[str, str]] = []
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _reply(self):
                owner.requests.append((self.command, self.path))
                code, body = answer(self.command, self.path)
                payload = json.dumps({"success": True, "submissionId": "driver-1", "serverSparkVersion": "4.2.0",
                                      **body}).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST = _reply

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def _flaky_master() -> _FakeMaster:
    """503 twice, then RUNNING, then FINISHED."""
    answers = iter([(503, {}), (503, {}), (200, {"driverState": "RUNNING"}), (200, {"driverState": "FINISHED"})])

    def answer(method: str, path: str) -> tuple[int, dict]:
        code, body = next(answers, (200, {"driverState": "FINISHED"}))
        return code, {"action": "SubmissionStatusResponse", **body}

    return _FakeMaster(answer)


def test_trigger_rides_out_a_few_503s(tmp_path):
    import asyncio

    master = _flaky_master()
    try:
        trigger = HorovodSparkJobTrigger(submission_id="driver-1", rest_url=master.url, staging=str(tmp_path),
                                         poll_interval_s=0.05, timeout_s=5)

        async def first_event():
            return await trigger.run().__anext__()

        event = asyncio.run(asyncio.wait_for(first_event(), timeout=60))
    finally:
        master.close()
    assert event.payload["status"] == "success"
    assert event.payload["driver_state"] == "FINISHED"
    assert len(master.requests) == 4  # two 503s retried, then RUNNING, then FINISHED


@pytest.mark.parametrize("cancel_on_kill", [True, False])
def test_on_kill_kills_the_driver_unless_told_not_to(tmp_path, cancel_on_kill):
    """A user's kill of the deferred task kills the driver; ``cancel_on_kill=False`` leaves it running."""
    import asyncio

    master = _FakeMaster(lambda method, path: (200, {"action": "KillSubmissionResponse",
                                                      "message": "Kill request submitted"}))
    try:
        trigger = HorovodSparkJobTrigger(submission_id="driver-1", rest_url=master.url, staging=str(tmp_path),
                                         timeout_s=5, cancel_on_kill=cancel_on_kill)
        asyncio.run(asyncio.wait_for(trigger.on_kill(), timeout=30))
    finally:
        master.close()
    assert master.requests == ([("POST", "/v1/submissions/kill/driver-1")] if cancel_on_kill else [])
