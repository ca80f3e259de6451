"""
Cluster deploy mode through spark-submit's legacy gateway (standalone/gateway.py), in parts: the driver id in
``ClientApp``'s output, spark-submit's environment and command line, the properties file, the driver program as a
zip Python runs, the driver's state from the master's ``/json/`` (recorded from a real master) read as the REST status
call's, and the master UI's kill link. The whole path on an authenticated cluster: tests/e2e/
test_secured_deployment.py.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from airflow_provider_horovod.clients import MasterState, RetryPolicy, SparkRestClient
from airflow_provider_horovod.clients.spark_rest_errors import SparkRestAuthError, SparkSubmissionError
from airflow_provider_horovod.standalone.gateway import (
    GATEWAY_JAR,
    gateway_command,
    gateway_env,
    parse_driver_id,
    stage_gateway_jar,
)
from airflow_provider_horovod.standalone.poll import FAILED, RUNNING, outside_kill, read_poll
from airflow_provider_horovod.standalone.submission import PYTHON_RUNNER, DriverSubmission
from airflow_provider_horovod.utils.spark_auth import write_auth_properties
from airflow_provider_horovod.utils.staging import Staging

DATA = Path(__file__).parents[1] / "data" / "spark_rest"
DRIVER = "driver-20261130080137-0000"
# ClientApp's lines, as Spark 4.2's spark-submit --verbose printed them against an authenticated master
SUBMITTED = """26/12/02 05:16:35 INFO ClientEndpoint: ... waiting before polling master for driver state
26/12/02 05:16:36 INFO ClientEndpoint: Driver successfully submitted as driver-20261202051635-0000
26/12/02 05:16:40 INFO ClientEndpoint: State of driver-20261202051635-0000 is RUNNING
"""
REFUSED = """26/12/02 05:16:33 ERROR ClientEndpoint: Error connecting to master (127.0.0.1:7077).
26/12/02 05:16:33 ERROR ClientEndpoint: No master is available, exiting.
"""


def _master(name: str) -> MasterState:
    return MasterState.from_json(json.loads((DATA / f"{name}.json").read_text()))


def test_the_driver_id_is_read_from_clientapps_output():
    assert parse_driver_id(SUBMITTED) == "driver-20261202051635-0000"
    assert parse_driver_id(REFUSED) is None and parse_driver_id("") is None


def test_spark_submit_gets_the_jobs_environment_and_only_what_it_needs_to_start():
    environ = {
        "PATH": "/usr/bin",
        "JAVA_HOME": "/jdk",
        "SPARK_LOCAL_IP": "127.0.0.1",
        "HOME": "/home/a",
        "AIRFLOW_CONN_SPARK": "spark://x?password=token",
        "AWS_SECRET_ACCESS_KEY": "theirs",
    }
    env = gateway_env({"HOROVOD_AIRFLOW_PAYLOAD_KEY": "ab12", "SPARK_LOCAL_IP": "10.0.0.1", "MINE": "1"}, environ)
    assert env == {
        "PATH": os.pathsep.join([os.path.dirname(sys.executable), "/usr/bin"]),
        "JAVA_HOME": "/jdk",
        "HOROVOD_AIRFLOW_PAYLOAD_KEY": "ab12",
        "MINE": "1",
    }  # the driver inherits all of it


def test_the_command_line_holds_no_property_secret_or_key():
    submission = DriverSubmission(
        app_resource="file:///s/horovod_driver.py",
        app_args=["/s/horovod_driver.py", "/s/runtime.zip", "--payload", "/s/payload.bin"],
        properties={"spark.authenticate.secret": "s3cr3t", "spark.app.name": "n"},
        env={"HOROVOD_AIRFLOW_PAYLOAD_KEY": "ab12"},
    )
    command = gateway_command(
        submission,
        master_url="spark://m:7077",
        jar_url="file:///s/horovod_driver.jar",
        properties_file="/tmp/p/spark-auth.properties",
    )
    assert command == [
        "spark-submit",
        "--master",
        "spark://m:7077",
        "--deploy-mode",
        "cluster",
        "--class",
        PYTHON_RUNNER,
        "--properties-file",
        "/tmp/p/spark-auth.properties",
        "--verbose",
        "file:///s/horovod_driver.jar",
        "/s/horovod_driver.py",
        "/s/runtime.zip",
        "--payload",
        "/s/payload.bin",
    ]
    assert not any(v in " ".join(command) for v in ("s3cr3t", "ab12", "spark.app.name"))


def test_the_properties_file_is_owner_only_and_escaped_as_java_reads_it(tmp_path):
    path = write_auth_properties(
        tmp_path / "p.properties", "se\\cret", properties={"spark.app.name": " lead=space:é", "odd key=1": "a\nb"}
    )
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert Path(path).read_text().splitlines() == [
        "spark.app.name=\\ lead=space:\\u00e9",
        "odd\\ key\\=1=a\\nb",
        "spark.authenticate=true",
        "spark.authenticate.secret=se\\\\cret",
    ]
    with pytest.raises(FileExistsError):
        write_auth_properties(path, "x")


def test_the_jar_is_the_driver_program_python_runs(tmp_path):
    staging = Staging(str(tmp_path / "staging"))
    staging.create()
    url = stage_gateway_jar(staging)
    assert url == (tmp_path / "staging" / GATEWAY_JAR).as_uri()  # ClientApp accepts only a URL ending in .jar
    done = subprocess.run(
        [sys.executable, str(tmp_path / "staging" / GATEWAY_JAR), "--no-such-flag"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "--payload" in done.stderr  # the driver program's own argument error


def test_the_masters_state_page_gives_the_rest_status_calls_states():
    running, completed = _master("master_state_running"), _master("master_state_completed")
    status = running.driver_status(DRIVER)
    assert (status.success, status.driver_state, status.worker_id) == (
        True,
        "RUNNING",
        "worker-20261130080131-127.0.0.1-42161",
    )
    assert read_poll(DRIVER, status, (None, None)).outcome == RUNNING
    ended = read_poll(DRIVER, completed.driver_status(DRIVER), ("app-1", None))
    assert (ended.outcome, ended.driver_state, ended.done) == (FAILED, "KILLED", True)
    with pytest.raises(SparkSubmissionError, match="does not know submission 'driver-none'"):
        completed.driver_status("driver-none")  # as the REST status call raises


def test_outside_kill_headlines():
    assert outside_kill("d-1", "KILLED", "app-1").startswith("Spark driver d-1 (application app-1) was KILLED")
    assert outside_kill("d-1", "FAILED", "app-1", "KILLED").startswith("Spark application app-1 of driver d-1")
    assert outside_kill("d-1", "FAILED", "app-1", "FINISHED") is None and outside_kill("d-1", "FAILED", None) is None
    assert outside_kill("d-1", "FINISHED", "app-1", "KILLED") is None


def test_the_kill_link_posts_the_form_and_takes_the_redirect():
    seen: list[httpx.Request] = []

    def master_ui(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if request.url.path == "/driver/kill/":
            return httpx.Response(302, headers={"Location": "http://m:8080/"})
        return httpx.Response(200, text="<html>master</html>")

    with SparkRestClient(master_ui_url="http://m:8080", transport=httpx.MockTransport(master_ui)) as client:
        assert client.kill_driver_ui(DRIVER) is None
    assert seen[0].method == "POST" and seen[0].headers["content-type"] == "application/x-www-form-urlencoded"
    assert httpx.QueryParams(seen[0].content.decode()) == httpx.QueryParams({"id": DRIVER, "terminate": "true"})
    refused = httpx.MockTransport(lambda request: httpx.Response(403))
    with SparkRestClient(master_ui_url="http://m:8080", transport=refused, retry=RetryPolicy(max_attempts=3)) as c:
        with pytest.raises(SparkRestAuthError, match="HTTP 403"):
            c.kill_driver_ui(DRIVER)
