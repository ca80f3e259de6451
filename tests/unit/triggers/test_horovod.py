"""The deferral trigger's contract: serialize round trip, argument and event validation."""

from __future__ import annotations

import pytest

from airflow_provider_horovod.standalone.poll import EVENT_KEYS, validate_event
from airflow_provider_horovod.triggers.horovod import HorovodSparkJobTrigger


def test_serialize_round_trip():
    trigger = HorovodSparkJobTrigger(
        submission_id="driver-20261130-0001",
        rest_url="http://m:6066",
        staging="/shared/.staging/d/r/t/try-1",
        poll_interval_s=2.5,
        cancel_on_kill=False,
        timeout_s=7,
    )
    path, kwargs = trigger.serialize()
    assert path == "airflow_provider_horovod.triggers.horovod.HorovodSparkJobTrigger"
    assert kwargs == {
        "submission_id": "driver-20261130-0001",
        "rest_url": "http://m:6066",
        "staging": "/shared/.staging/d/r/t/try-1",
        "poll_interval_s": 2.5,
        "cancel_on_kill": False,
        "timeout_s": 7,
        "conn_id": None,
        "master_ui_url": None,
        "mlflow_conn_id": None,
        "mlflow_run_id": None,
    }
    assert HorovodSparkJobTrigger(**kwargs).serialize() == (path, kwargs)
    with_conn = HorovodSparkJobTrigger(**{**kwargs, "conn_id": "spark_secure"})
    assert with_conn.serialize()[1] == {**kwargs, "conn_id": "spark_secure"}  # the id only: the token stays put
    tracked = with_conn.with_mlflow_run("mlflow_default", "run-1")
    assert tracked.serialize()[1] == {
        **kwargs,
        "conn_id": "spark_secure",
        "mlflow_conn_id": "mlflow_default",
        "mlflow_run_id": "run-1",
    }  # the MLflow connection's id only, too


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
    A fake REST submission server (or master web UI) on 127.0.0.1 answering ``answer(method, path) -> (status, json
    body)``, or ``(status, body, headers)`` (a 503 storm or a triggerer's state lookup can't be produced on demand with
    a real master); it records the requests and their ``Authorization`` headers. ``rest=True``: each body is a REST
    submission server's answer (its common keys added); ``False``: the body as it is (the web UI's ``/json/``).
    """

    def __init__(self, answer, rest: bool = True):
        import http.server
        import json
        import threading

        self.requests: list[tuple[str, str]] = []
        self.authorization: list[str | None] = []
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _reply(self):
                owner.requests.append((self.command, self.path))
                owner.authorization.append(self.headers.get("Authorization"))
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                code, body, *headers = answer(self.command, self.path)
                if rest:
                    body = {"success": True, "submissionId": "driver-1", "serverSparkVersion": "4.2.0", **body}
                payload = json.dumps(body).encode()
                self.send_response(code)
                for name, value in (headers[0] if headers else {}).items():
                    self.send_header(name, value)
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
        trigger = HorovodSparkJobTrigger(
            submission_id="driver-1", rest_url=master.url, staging=str(tmp_path), poll_interval_s=0.05, timeout_s=5
        )

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

    master = _FakeMaster(
        lambda method, path: (200, {"action": "KillSubmissionResponse", "message": "Kill request submitted"})
    )
    try:
        trigger = HorovodSparkJobTrigger(
            submission_id="driver-1",
            rest_url=master.url,
            staging=str(tmp_path),
            timeout_s=5,
            cancel_on_kill=cancel_on_kill,
        )
        asyncio.run(asyncio.wait_for(trigger.on_kill(), timeout=30))
    finally:
        master.close()
    assert master.requests == ([("POST", "/v1/submissions/kill/driver-1")] if cancel_on_kill else [])


TOKEN = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhaXJmbG93In0.c2lnbmF0dXJl"
"""A JWS-shaped bearer token (the connection's password, for a master's ``JWSFilter``)."""
PATH = "airflow_provider_horovod.triggers.horovod.HorovodSparkJobTrigger"
FIRST = {
    "submission_id": "driver-1",
    "rest_url": "{rest}",
    "staging": "{staging}",
    "poll_interval_s": 0.05,
    "cancel_on_kill": True,
    "timeout_s": 5,
}
PERSISTED = {  # what serialize() gave in each release (git log -- airflow_provider_horovod/triggers/horovod.py)
    "5b57f0c: the first trigger": FIRST,
    "2b6db17: conn_id, the bearer token's connection": {**FIRST, "conn_id": "spark_secure"},
    "01fc3df: master_ui_url, a driver submitted through spark-submit's gateway": {
        **FIRST,
        "rest_url": "http://127.0.0.1:1",
        "conn_id": "spark_secure",
        "master_ui_url": "{ui}",
    },
    "fe027d4: the MLflow run a kill ends": {
        **FIRST,
        "conn_id": "spark_secure",
        "master_ui_url": None,
        "mlflow_conn_id": "no_such_mlflow",
        "mlflow_run_id": "run-1",
    },
}
"""The forms a trigger is persisted in, as users' databases may still hold them; placeholders filled per test."""


def _master_page(state: str | None) -> dict:
    """The master web UI's ``/json/`` (recorded from a real master) with driver-1 active in ``state``, or completed
    FINISHED (``None``)."""
    import json
    from pathlib import Path

    page = json.loads((Path(__file__).parents[1] / "data" / "spark_rest" / "master_state_running.json").read_text())
    driver = {**page["activedrivers"][0], "id": "driver-1", "state": state or "FINISHED"}
    return {**page, "activedrivers": [driver] if state else [], "completeddrivers": [] if state else [driver]}


def _persisted_master(gateway: bool) -> _FakeMaster:
    """A master whose driver-1 is RUNNING, then FINISHED; it takes a kill: the REST server, or (``gateway``) the
    web UI's ``/json/`` and kill link."""
    states = iter(["RUNNING"])

    def rest(method: str, path: str) -> tuple:
        if path == "/v1/submissions/kill/driver-1":
            return 200, {"action": "KillSubmissionResponse", "message": "Kill request submitted"}
        assert (method, path) == ("GET", "/v1/submissions/status/driver-1")
        return 200, {"action": "SubmissionStatusResponse", "driverState": next(states, "FINISHED")}

    def web_ui(method: str, path: str) -> tuple:
        if (method, path) == ("POST", "/driver/kill/"):
            return 302, {}, {"Location": "/"}
        if path == "/":
            return 200, {}
        assert (method, path) == ("GET", "/json/")
        return 200, _master_page(next(states, None))

    return _FakeMaster(web_ui if gateway else rest, rest=not gateway)


@pytest.mark.parametrize("release", list(PERSISTED))
def test_a_trigger_persisted_by_an_earlier_release_loads_runs_and_kills(release, tmp_path, monkeypatch):
    """
    A deferred task's trigger, persisted by an earlier release, is loaded by its class path and kwargs as the
    triggerer does, then follows its driver to the same event and kills it through the same channel, with the
    connection's token when it names one.
    """
    import asyncio
    import importlib
    import json

    def import_string(path: str):  # as the triggerer loads a trigger's class (airflow._shared.module_loading)
        module, name = path.rsplit(".", 1)
        return getattr(importlib.import_module(module), name)

    monkeypatch.setenv(
        "AIRFLOW_CONN_SPARK_SECURE",
        json.dumps({"conn_type": "spark", "host": "spark://127.0.0.1", "port": 7077, "password": TOKEN}),
    )
    (tmp_path / "status.json").write_text(json.dumps({"app_id": "app-1", "ui_url": None}))
    gateway = bool(PERSISTED[release].get("master_ui_url"))
    master = _persisted_master(gateway)
    kwargs = {
        k: v.format(rest=master.url, ui=master.url, staging=str(tmp_path)) if isinstance(v, str) else v
        for k, v in PERSISTED[release].items()
    }
    try:
        trigger = import_string(PATH)(**kwargs)
        assert trigger.serialize() == (
            PATH,
            {"conn_id": None, "master_ui_url": None, "mlflow_conn_id": None, "mlflow_run_id": None, **kwargs},
        )

        async def first_event():
            return await trigger.run().__anext__()

        event = asyncio.run(asyncio.wait_for(first_event(), timeout=60))
        asyncio.run(asyncio.wait_for(import_string(PATH)(**kwargs).on_kill(), timeout=60))
    finally:
        master.close()
    assert event.payload == {
        "status": "success",
        "submission_id": "driver-1",
        "driver_state": "FINISHED",
        "app_id": "app-1",
        "ui_url": None,
        "message": None,
        "staging": str(tmp_path),
    }
    if gateway:
        assert master.requests == [("GET", "/json/"), ("GET", "/json/"), ("POST", "/driver/kill/"), ("GET", "/")]
    else:
        assert master.requests == [("GET", "/v1/submissions/status/driver-1")] * 2 + [
            ("POST", "/v1/submissions/kill/driver-1")
        ]
    token = f"Bearer {TOKEN}" if kwargs.get("conn_id") else None
    assert master.authorization == [token] * len(master.requests)


def test_a_connection_the_triggerer_cannot_use_fails_the_trigger(tmp_path, monkeypatch):
    """
    A CA bundle the triggerer cannot load fails the trigger (Airflow fails the task, whose ``resume_execution`` kills
    the driver) rather than ending the wait as a driver whose state could not be read.
    """
    import asyncio
    import json

    from airflow_provider_horovod.clients import SparkRestTLSError

    monkeypatch.setenv(
        "AIRFLOW_CONN_SPARK_SECURE",
        json.dumps(
            {
                "conn_type": "spark",
                "host": "spark://127.0.0.1",
                "port": 7077,
                "password": TOKEN,
                "extra": {"spark.airflowProviderHorovod.caBundle": str(tmp_path / "missing.pem")},
            }
        ),
    )
    trigger = HorovodSparkJobTrigger(
        submission_id="driver-1", rest_url="https://127.0.0.1:1", staging=str(tmp_path), conn_id="spark_secure"
    )
    with pytest.raises(SparkRestTLSError, match="cannot load the CA bundle"):
        asyncio.run(asyncio.wait_for(trigger.run().__anext__(), timeout=30))
