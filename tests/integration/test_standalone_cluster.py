"""
The Spark REST clients against a real standalone cluster (tests/standalone.py): a master with its REST submission
server and two workers on 127.0.0.1. Drivers are submitted in cluster deploy mode through the REST ``create``
call (a Python file run by ``org.apache.spark.deploy.PythonRunner``), followed through the application's own UI
and the master, and killed through the REST ``kill`` call.

``SPARK_REST_RECORD=1`` also writes the raw answers under tests/unit/data/spark_rest/, the recorded payloads the
unit tests parse (tests/unit/clients/test_spark_rest.py).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import httpx
import psutil
import pytest

from airflow_provider_horovod.clients import (
    AsyncSparkRestClient,
    RetryPolicy,
    SparkRestClient,
    SparkRestError,
    SparkRestUnavailableError,
    SparkSubmissionError,
)
from tests.standalone import StandaloneCluster, free_port, standalone_cluster

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]

DATA = Path(__file__).resolve().parent.parent / "unit" / "data" / "spark_rest"
RECORD = os.environ.get("SPARK_REST_RECORD") == "1"
PYTHON_RUNNER = "org.apache.spark.deploy.PythonRunner"
T = TypeVar("T")

# Three jobs: one succeeds, one fails (a task raises), one runs until the driver is killed.
TRACKED_APP = """
import threading
from pyspark.sql import SparkSession

sc = SparkSession.builder.getOrCreate().sparkContext
print("sum of squares:", sc.parallelize(range(100), 2).map(lambda x: x * x).sum(), flush=True)

def fail(_):
    raise ValueError("deliberate failure for the Spark REST test")

try:
    sc.parallelize(range(1), 1).foreach(fail)  # one task: no sibling task killed later, the counts stay put
except Exception as exc:
    print("job failed as planned:", type(exc).__name__, flush=True)

def block(_):
    threading.Event().wait()  # until the driver is killed

sc.parallelize([0], 1).foreach(block)
"""


class RecordingTransport(httpx.HTTPTransport):
    """The real network transport, keeping the last answer so a test can save it as a recorded payload."""

    last: tuple[int, bytes] | None = None

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = super().handle_request(request)
        response.read()
        self.last = (response.status_code, response.content)
        return response

    def save(self, name: str) -> None:
        """Write the last answer to ``DATA/name.json`` when ``SPARK_REST_RECORD=1``."""
        assert self.last is not None
        if RECORD:
            DATA.mkdir(parents=True, exist_ok=True)
            (DATA / f"{name}.json").write_text(json.dumps(json.loads(self.last[1]), indent=2) + "\n")


def wait_for(probe: Callable[[], T | None], timeout_s: float, what: str, cluster: StandaloneCluster) -> T:
    """Poll ``probe`` (external processes: the cluster) every 0.5 s until it returns a true value, for ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while True:
        try:
            value = probe()
            if value:
                return value
        except SparkRestError as exc:
            last = exc
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what} (last error: {last})\n{cluster.log_tail()}")
        time.sleep(0.5)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    with standalone_cluster(workers=2, cores_per_worker=2, work_dir=tmp_path_factory.mktemp("standalone")) as c:
        yield c


@pytest.fixture(scope="module")
def recorder() -> RecordingTransport:
    return RecordingTransport()


@pytest.fixture(scope="module")
def client(cluster: StandaloneCluster, recorder: RecordingTransport) -> Iterator[SparkRestClient]:
    with SparkRestClient(
        master_ui_url=cluster.web_ui_url,
        rest_url=cluster.rest_url,
        timeout_s=10,
        retry=RetryPolicy(max_attempts=3, initial_backoff_s=0.2),
        transport=recorder,
    ) as c:
        yield c


def submit_python(
    client: SparkRestClient,
    cluster: StandaloneCluster,
    script: Path,
    name: str,
    conf: dict[str, str] | None = None,
    app_resource: str | None = None,
) -> str:
    response = client.create_submission(
        app_resource=app_resource or script.as_uri(),
        main_class=PYTHON_RUNNER,
        app_args=[str(script), ""],
        spark_properties={
            "spark.master": cluster.master_url,
            "spark.app.name": name,
            "spark.submit.deployMode": "cluster",
            "spark.driver.supervise": "false",
            "spark.driver.memory": "512m",
            "spark.driver.cores": "1",
            "spark.pyspark.python": sys.executable,
            "spark.pyspark.driver.python": sys.executable,
            **(conf or {}),
        },
        environment_variables={"PYSPARK_PYTHON": sys.executable},
    )
    assert response.success and response.submission_id and response.submission_id.startswith("driver-"), response
    return response.submission_id


def test_master_lists_alive_workers(cluster: StandaloneCluster, client: SparkRestClient) -> None:
    state = client.master_state()
    assert state.url == cluster.master_url
    assert state.status == "ALIVE"
    assert state.alive_workers == 2 == len(state.workers)
    assert state.cores == 4 and state.cores_used == 0
    assert {w.state for w in state.workers} == {"ALIVE"}
    assert all(w.host == "127.0.0.1" and w.web_ui_address.startswith("http://127.0.0.1:") for w in state.workers)
    assert state == asyncio.run(_async_master_state(cluster))


def test_fixture_tracks_orphaned_processes_by_marker(cluster: StandaloneCluster) -> None:
    # A process of the cluster whose parent has exited (as a killed driver's Python child could be).
    shell = subprocess.run(
        ["sh", "-c", "sleep 120 >/dev/null 2>&1 & echo $!"],
        env=cluster.env,
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    orphan = psutil.Process(int(shell.stdout))
    try:
        assert orphan.pid in {p.pid for p in cluster.leftover_processes()}
    finally:
        orphan.kill()
        orphan.wait(timeout=10)
    assert orphan.pid not in {p.pid for p in cluster.leftover_processes()}


async def _async_master_state(cluster: StandaloneCluster):
    async with AsyncSparkRestClient(master_ui_url=cluster.web_ui_url, timeout_s=10) as spark:
        return await spark.master_state()


def test_track_and_kill_an_application(
    cluster: StandaloneCluster, client: SparkRestClient, recorder: RecordingTransport, tmp_path: Path
) -> None:
    script = tmp_path / "tracked_app.py"
    script.write_text(TRACKED_APP)
    ui_port = free_port()
    driver_id = submit_python(
        client,
        cluster,
        script,
        "rest-tracked-app",
        {
            "spark.ui.port": str(ui_port),
            "spark.port.maxRetries": "0",
            "spark.driver.host": "127.0.0.1",
            "spark.cores.max": "1",
            "spark.executor.cores": "1",
            "spark.executor.memory": "512m",
            "spark.task.maxFailures": "1",
            "spark.ui.showConsoleProgress": "false",
        },
    )
    recorder.save("submission_create")

    running = wait_for(
        lambda: (s := client.driver_status(driver_id)).driver_state == "RUNNING" and s, 60, "the driver to run", cluster
    )
    recorder.save("submission_status_running")
    assert running.is_active and not running.is_terminal and running.worker_id.startswith("worker-")

    ui = SparkRestClient(
        ui_url=f"http://127.0.0.1:{ui_port}", timeout_s=10, retry=RetryPolicy(max_attempts=1), transport=recorder
    )
    with ui:
        apps = wait_for(lambda: ui.applications() or None, 90, "the driver's UI", cluster)
        app_id = apps[0].id

        def third_job_running():
            jobs = ui.jobs(app_id)
            return jobs if len(jobs) == 3 and jobs[0].status == "RUNNING" and jobs[0].num_active_tasks else None

        wait_for(third_job_running, 120, "the third job to run", cluster)
        _check_live_application(cluster, client, ui, recorder, app_id, driver_id)

        # The kill: asynchronous on the master's side, the status reaches KILLED.
        kill = client.kill_submission(driver_id)
        recorder.save("submission_kill")
        assert kill.success and kill.submission_id == driver_id, kill
        killed = wait_for(
            lambda driver_id=driver_id: (s := client.driver_status(driver_id)).is_terminal and s,
            60,
            "the driver to be killed",
            cluster,
        )
        recorder.save("submission_status_killed")
        assert killed.driver_state == "KILLED" and killed.is_failed and not killed.is_successful

        # Its UI went with it: connection refused, retried, then SparkRestUnavailableError without a status.
        gone = SparkRestClient(
            ui_url=ui.endpoints.ui_url, timeout_s=5, retry=RetryPolicy(max_attempts=2, initial_backoff_s=0.1)
        )
        with gone:
            unavailable = wait_for(lambda: _unavailable(gone), 30, "the driver's UI to stop", cluster)
        assert unavailable.status_code is None and unavailable.url.endswith("/api/v1/applications")

    def app_completed():
        state = client.master_state()
        app = state.application(app_id)
        return (
            state
            if app and app in state.completed_apps and state.driver(driver_id) in state.completed_drivers
            else None
        )

    state = wait_for(app_completed, 60, "the master to list the application as completed", cluster)
    recorder.save("master_state_completed")
    assert state.driver(driver_id).state == "KILLED"
    assert state.application(app_id).state in {"FINISHED", "KILLED"}
    # Killing again is not an error: the master says it is already finished.
    again = client.kill_submission(driver_id)
    assert not again.success and "already finished" in again.message


def _unavailable(client: SparkRestClient) -> SparkRestUnavailableError | None:
    try:
        client.applications()
    except SparkRestUnavailableError as exc:
        return exc
    return None


def _check_live_application(
    cluster: StandaloneCluster,
    client: SparkRestClient,
    ui: SparkRestClient,
    recorder: RecordingTransport,
    app_id: str,
    driver_id: str,
) -> None:
    (app,) = ui.applications()
    recorder.save("applications")
    assert app.id == app_id and app_id.startswith("app-") and app.name == "rest-tracked-app"
    assert not app.completed and app.latest_attempt.end_time_epoch_ms is None
    assert (ui.application(app_id).id, ui.application(app_id).name) == (app.id, app.name)  # duration grows

    jobs = sorted(ui.jobs(app_id), key=lambda j: j.job_id)
    recorder.save("jobs")
    assert [j.status for j in jobs] == ["SUCCEEDED", "FAILED", "RUNNING"]
    assert jobs[0].num_completed_tasks == jobs[0].num_tasks == 2 and jobs[0].is_terminal
    assert jobs[1].num_failed_tasks == 1 and jobs[1].num_failed_stages == 1
    assert jobs[2].num_active_tasks == 1 and not jobs[2].is_terminal
    assert [j.job_id for j in ui.jobs(app_id, status="running")] == [jobs[2].job_id]

    stages = {s.stage_id: s for s in ui.stages(app_id)}
    recorder.save("stages")
    done, failed, active = (stages[j.stage_ids[0]] for j in jobs)
    assert done.status == "COMPLETE" and done.num_completed_tasks == 2 and done.failure_reason is None
    assert failed.status == "FAILED" and "deliberate failure for the Spark REST test" in failed.failure_reason
    assert active.status == "ACTIVE" and active.num_active_tasks == 1 and not active.is_terminal

    executors = ui.executors(app_id)
    recorder.save("executors")
    driver = next(e for e in executors if e.is_driver)
    (executor,) = (e for e in executors if not e.is_driver)
    assert driver.total_cores == 0 and set(driver.executor_logs) == {"stdout", "stderr"}
    assert executor.is_active and executor.total_cores == 1 and executor.active_tasks == 1
    assert executor.host_port.startswith("127.0.0.1:") and executor.executor_logs["stderr"].startswith("http://")
    assert {e.id for e in ui.executors(app_id, include_dead=True)} == {e.id for e in executors}

    # A 404 is not retried: with a 30 s backoff, a retry would take longer than this.
    slow_retry = SparkRestClient(ui_url=ui.endpoints.ui_url, retry=RetryPolicy(max_attempts=2, initial_backoff_s=30))
    started = time.monotonic()
    with slow_retry, pytest.raises(SparkRestError) as info:
        slow_retry.jobs("app-does-not-exist")
    assert info.value.status_code == 404 and "app-does-not-exist" in info.value.url
    assert time.monotonic() - started < 20

    # The same through the async client.
    async def read_async():
        async with AsyncSparkRestClient(ui_url=ui.endpoints.ui_url, master_ui_url=cluster.web_ui_url) as spark:
            return await asyncio.gather(
                spark.application(app_id),
                spark.jobs(app_id),
                spark.stages(app_id),
                spark.executors(app_id),
                spark.master_state(),
            )

    a_app, a_jobs, a_stages, a_executors, a_master = asyncio.run(read_async())
    assert a_app.id == app.id
    assert sorted((j.job_id, j.status) for j in a_jobs) == [(j.job_id, j.status) for j in jobs]
    assert {s.stage_id: s.status for s in a_stages} == {k: s.status for k, s in stages.items()}
    assert {e.id for e in a_executors} == {e.id for e in executors}

    state = client.master_state()
    recorder.save("master_state_running")
    assert state.application(app_id) in state.active_apps and state.application(app_id).state == "RUNNING"
    assert state.driver(driver_id) in state.active_drivers and state.driver(driver_id).main_class == PYTHON_RUNNER
    assert a_master.application(app_id) is not None


def test_drivers_reach_each_terminal_state(
    cluster: StandaloneCluster, client: SparkRestClient, recorder: RecordingTransport, tmp_path: Path
) -> None:
    ok, failing = tmp_path / "exit_0.py", tmp_path / "exit_3.py"
    ok.write_text("print('done')\n")
    failing.write_text("import sys\nsys.exit(3)\n")
    ids = {
        "FINISHED": submit_python(client, cluster, ok, "rest-exit-0"),
        "FAILED": submit_python(client, cluster, failing, "rest-exit-3"),
        "ERROR": submit_python(
            client, cluster, ok, "rest-missing-resource", app_resource=(tmp_path / "missing.py").as_uri()
        ),
    }
    for expected, driver_id in ids.items():
        status = wait_for(
            lambda driver_id=driver_id: (s := client.driver_status(driver_id)).is_terminal and s,
            90,
            f"driver {driver_id} to end",
            cluster,
        )
        recorder.save(f"submission_status_{expected.lower()}")
        assert status.driver_state == expected, (status, cluster.log_tail())
        assert status.is_successful == (expected == "FINISHED") and status.is_failed == (expected != "FINISHED")
    assert "missing.py" in client.driver_status(ids["ERROR"]).message


def test_submission_server_errors(
    cluster: StandaloneCluster, client: SparkRestClient, recorder: RecordingTransport
) -> None:
    with pytest.raises(SparkSubmissionError) as unknown:
        client.driver_status("driver-does-not-exist")
    recorder.save("submission_status_unknown")
    assert unknown.value.status_code == 200 and "driver-does-not-exist" in str(unknown.value)

    kill = client.kill_submission("driver-does-not-exist")
    recorder.save("submission_kill_unknown")
    assert not kill.success and "does not exist" in kill.message

    with pytest.raises(SparkRestError) as version:
        client.request_json("GET", f"{cluster.rest_url}/v99/submissions/status/driver-x")
    recorder.save("rest_error_unknown_version")
    # Spark's own status for this case (StandaloneRestServer.SC_UNKNOWN_PROTOCOL_VERSION): a 4xx, not retried.
    assert version.value.status_code == 468 and "Unknown protocol version 'v99'" in str(version.value)

    with pytest.raises(SparkRestError) as malformed:
        client.request_json(
            "POST",
            f"{cluster.rest_url}/v1/submissions/create",
            body={"action": "CreateSubmissionRequest", "clientSparkVersion": "4.2.0"},
        )
    recorder.save("rest_error_malformed_create")
    assert malformed.value.status_code == 400 and "Malformed" in str(malformed.value)
