"""
The standalone hook's route and its async twins (standalone/hook.py): a driver is followed and killed on the route
the connection gives (the REST submission server, or the master web UI for a driver the gateway submitted) or on the
route a trigger persisted; ``status``/``a_status`` and ``kill``/``a_kill`` make the same requests there. Against the
real hook and clients, the master faked by ``httpx.MockTransport``.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import pytest

from airflow_provider_horovod.exceptions import HorovodJobError
from airflow_provider_horovod.job import TrainingJob
from airflow_provider_horovod.runtime.settings import JobSettings
from airflow_provider_horovod.standalone.hook import HorovodStandaloneHook
from airflow_provider_horovod.standalone.master import DriverRoute
from airflow_provider_horovod.utils.spark_auth import CONNECTION_SECRET_EXTRA

DATA = Path(__file__).parents[1] / "data" / "spark_rest"
REST, UI = "http://127.0.0.1:6066", "http://127.0.0.1:8080"
TOKEN = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhaXJmbG93In0.c2lnbmF0dXJl"


def _connection(monkeypatch, name: str, **extra) -> None:
    monkeypatch.setenv(
        f"AIRFLOW_CONN_{name.upper()}",
        json.dumps(
            {
                "conn_type": "spark",
                "host": "spark://127.0.0.1",
                "port": 7077,
                "password": TOKEN,
                "extra": {
                    "spark.airflowProviderHorovod.restPort": 6066,
                    "spark.airflowProviderHorovod.uiPort": 8080,
                    **extra,
                },
            }
        ),
    )


def test_the_connection_gives_the_route(monkeypatch):
    _connection(monkeypatch, "rest_master")
    _connection(monkeypatch, "secured_master", **{CONNECTION_SECRET_EXTRA: "the-rpc-secret"})
    assert HorovodStandaloneHook(conn_id="rest_master").route == DriverRoute(REST, None)
    assert HorovodStandaloneHook(conn_id="secured_master").route == DriverRoute(REST, UI)  # the gateway's


def _master(asked: list[tuple[str, str, str | None]]) -> httpx.MockTransport:
    """A master whose driver-1 is RUNNING, on both routes; it takes kills; it records each request."""
    page = json.loads((DATA / "master_state_running.json").read_text())  # recorded from a real master
    page["activedrivers"] = [{**page["activedrivers"][0], "id": "driver-1"}]

    def handler(request: httpx.Request) -> httpx.Response:
        asked.append((request.method, str(request.url), request.headers.get("Authorization")))
        path = request.url.path
        if path == "/json/":
            return httpx.Response(200, json=page)
        if path == "/driver/kill/":
            return httpx.Response(302, headers={"Location": f"{UI}/"})
        if path == "/":
            return httpx.Response(200, text="<html>master</html>")
        action = "SubmissionStatusResponse" if "/status/" in path else "KillSubmissionResponse"
        return httpx.Response(
            200,
            json={
                "action": action,
                "success": True,
                "submissionId": "driver-1",
                "driverState": "RUNNING",
                "serverSparkVersion": "4.2.0",
            },
        )

    return httpx.MockTransport(handler)


@pytest.mark.parametrize("route", [DriverRoute(REST), DriverRoute(REST, UI)], ids=["rest", "web-ui"])
@pytest.mark.parametrize("conn_id", [None, "spark_secure"])
def test_the_async_twins_make_the_sync_calls_requests_on_the_persisted_route(monkeypatch, route, conn_id):
    _connection(monkeypatch, "spark_secure", **{"spark.airflowProviderHorovod.restPort": 1})  # elsewhere now
    sync_asked: list = []
    hook = HorovodStandaloneHook(conn_id=conn_id, route=route, timeout_s=5, transport=_master(sync_asked))
    assert hook.status("driver-1").driver_state == "RUNNING"
    hook.kill("driver-1")
    async_asked: list = []
    twin = HorovodStandaloneHook(conn_id=conn_id, route=route, timeout_s=5, transport=_master(async_asked))

    async def follow_and_kill() -> str | None:
        state = (await twin.a_status("driver-1")).driver_state
        await twin.a_kill("driver-1")
        return state

    assert asyncio.run(asyncio.wait_for(follow_and_kill(), timeout=30)) == "RUNNING"
    assert async_asked == sync_asked
    token = f"Bearer {TOKEN}" if conn_id else None
    if route.master_ui_url:
        assert sync_asked == [
            ("GET", f"{UI}/json/", token),
            ("POST", f"{UI}/driver/kill/", token),
            ("GET", f"{UI}/", token),
        ]
    else:
        assert sync_asked == [
            ("GET", f"{REST}/v1/submissions/status/driver-1", token),
            ("POST", f"{REST}/v1/submissions/kill/driver-1", token),
        ]


def test_a_hook_made_with_a_route_and_no_connection_follows_and_kills_only(tmp_path):
    hook = HorovodStandaloneHook(conn_id=None, route=DriverRoute(REST))
    job = TrainingJob(key=b"k" * 32, payload=b"p", settings=JobSettings(np=2), artifact_dir=str(tmp_path / "art"))
    with pytest.raises(HorovodJobError, match="cluster deploy mode needs a connection"):
        hook.submit(job, staging=tmp_path / "staging")
    assert not (tmp_path / "staging").exists()
