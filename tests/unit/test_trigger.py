"""The deferral trigger's contract: serialize round trip, argument and event validation."""

from __future__ import annotations

import pytest

from airflow_provider_horovod.triggers.horovod import EVENT_KEYS, HorovodSparkJobTrigger, validate_event


def test_serialize_round_trip():
    trigger = HorovodSparkJobTrigger(submission_id="driver-20261130-0001", rest_url="http://m:6066",
                                     staging="/shared/.staging/d/r/t/try-1", poll_interval_s=2.5,
                                     cancel_on_kill=False, timeout_s=7)
    path, kwargs = trigger.serialize()
    assert path == "airflow_provider_horovod.triggers.horovod.HorovodSparkJobTrigger"
    assert kwargs == {"submission_id": "driver-20261130-0001", "rest_url": "http://m:6066",
                      "staging": "/shared/.staging/d/r/t/try-1", "poll_interval_s": 2.5, "cancel_on_kill": False,
                      "timeout_s": 7}
    assert HorovodSparkJobTrigger(**kwargs).serialize() == (path, kwargs)


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


class _FlakyMaster:
    """A fake REST submission server on 127.0.0.1: 503 twice, then RUNNING, then FINISHED (a 503 storm can't
    be produced on demand by a real master)."""

    def __init__(self):
        import http.server
        import threading

        answers = iter([(503, {}), (503, {}), (200, {"driverState": "RUNNING"}), (200, {"driverState": "FINISHED"})])
        self.requests = 0
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                import json

                owner.requests += 1
                code, body = next(answers, (200, {"driverState": "FINISHED"}))
                payload = json.dumps({"action": "SubmissionStatusResponse", "success": True,
                                      "submissionId": "driver-1", "serverSparkVersion": "4.2.0", **body}).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def test_trigger_rides_out_a_few_503s(tmp_path):
    import asyncio

    master = _FlakyMaster()
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
    assert master.requests == 4  # two 503s retried, then RUNNING, then FINISHED
