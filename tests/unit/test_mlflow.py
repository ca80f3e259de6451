"""
MLflow tracking: the operator's parse-time checks, and the hook and the driver's metrics sink against a real tracking
server on 127.0.0.1 (tests/mlflow_server.py; one for the module, ~10 s to start).
"""

from __future__ import annotations

import importlib.util
import json
import sys
import time

import pytest

from airflow_provider_horovod.operators.horovod import HorovodRunnerOperator
from airflow_provider_horovod.runtime.driver.metrics import MetricsCollector
from airflow_provider_horovod.runtime.driver.runner import HorovodRunner
from airflow_provider_horovod.runtime.mlflow_sink import MlflowMetricsSink
from tests.integration.shared_cluster_jobs import wait_until
from tests.mlflow_server import MlflowServer


def _train():
    return None


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """One real tracking server for the module; the outage test stops and starts it again (same port and store)."""
    pytest.importorskip("mlflow", reason="the mlflow extra (mlflow-skinny) is not installed")
    server = MlflowServer(tmp_path_factory.mktemp("mlflow-server"))
    try:
        server.start()
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def mlflow_server(server) -> str:
    return server.url


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"mlflow_experiment": "x"}, "need mlflow_conn_id"),
        ({"mlflow_register_model": "m"}, "need mlflow_conn_id"),
        ({"mlflow_conn_id": ""}, "mlflow_conn_id must be a non-empty string"),
        ({"mlflow_conn_id": "m", "mlflow_register_model": 3}, "mlflow_register_model must be a non-empty string"),
    ],
)
def test_bad_mlflow_arguments_fail_at_parse_time(kwargs, message):
    with pytest.raises(ValueError, match=message):
        HorovodRunnerOperator(task_id="t", python_callable=_train, **kwargs)


def test_without_the_client_the_error_gives_the_install_command(monkeypatch):
    # the one case a real environment cannot give while the dev extra has the client: find_spec says it is missing
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "mlflow" else real(name, *a))
    for make in (
        lambda: HorovodRunnerOperator(task_id="t", python_callable=_train, mlflow_conn_id="m"),
        lambda: HorovodRunner(np=2, mlflow_run="abc"),
    ):
        with pytest.raises(ValueError, match=r"pip install 'airflow-provider-horovod\[mlflow\]'"):
            make()


def test_runner_mlflow_run_must_be_a_flag_or_a_run_id():
    with pytest.raises(ValueError, match="mlflow_run must be True, False or a run id"):
        HorovodRunner(np=2, mlflow_run="")


def test_hook_run_lifecycle_and_registry_against_a_real_server(mlflow_server, monkeypatch, tmp_path):
    from airflow_provider_horovod.hooks.mlflow import MlflowHook

    host, port = mlflow_server.rsplit(":", 1)
    monkeypatch.setenv(
        "AIRFLOW_CONN_MLFLOW_T",
        json.dumps(
            {"conn_type": "http", "host": host.split("//")[1], "port": int(port), "login": "u", "password": "p"}
        ),
    )
    hook = MlflowHook("mlflow_t")
    env = hook.start_run("unit", tags={"airflow.try_number": 1}, params={"np": 2, "big": "x" * 2000})
    assert env["MLFLOW_TRACKING_URI"] == mlflow_server
    assert env["MLFLOW_TRACKING_USERNAME"] == "u" and env["MLFLOW_TRACKING_PASSWORD"] == "p"
    run_id = env["MLFLOW_RUN_ID"]
    assert hook.run_status(run_id) == "RUNNING" and hook.run_status("0" * 32) is None

    # the driver's sink: rank 0's records become metric history at their steps; the others' are not its business
    with MetricsCollector(None, sink=MlflowMetricsSink.from_env(env), sink_interval_s=0.2, log_interval_s=60) as c:
        for step in range(1, 6):
            c.add({"time": time.time(), "rank": 0, "step": step, "metrics": {"loss": 1.0 / step, "nan": None}})
            c.add({"time": time.time(), "rank": 1, "step": step})
    client = hook.get_conn()
    assert [(m.step, m.value) for m in client.get_metric_history(run_id, "loss")] == [(s, 1.0 / s) for s in range(1, 6)]
    assert client.get_metric_history(run_id, "nan") == []
    run = client.get_run(run_id)
    assert run.data.params["np"] == "2" and len(run.data.params["big"]) == 500

    model = tmp_path / "model.pt"
    model.write_bytes(b"weights")
    version = hook.register_model(run_id, "unit_model", alias="candidate", model_file=str(model))
    again = hook.register_model(run_id, "unit_model", alias="candidate", model_uri=f"runs:/{run_id}/model")
    assert (version, again) == ("1", "2")
    assert client.get_model_version_by_alias("unit_model", "candidate").version == "2"
    assert [f.path for f in client.list_artifacts(run_id, "model")] == ["model/model.pt"]
    hook.log_outputs(run_id, str(tmp_path), [str(model)])
    hook.end_run(run_id, "FAILED", {"horovod.error": "RuntimeError: boom"})
    run = client.get_run(run_id)
    assert run.info.status == "FAILED" and run.data.tags["horovod.error"] == "RuntimeError: boom"
    assert run.data.tags["horovod.artifact_dir"] == str(tmp_path)
    assert (
        hook.run_url(run.info.experiment_id, run_id)
        == f"{mlflow_server}/#/experiments/{run.info.experiment_id}/runs/{run_id}"
    )


def test_a_server_that_never_answers_costs_only_the_metrics_and_the_end_counts_them(capfd, monkeypatch):
    pytest.importorskip("mlflow")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")  # port 9: refused at once, no backoff
    sink = MlflowMetricsSink(
        {"MLFLOW_RUN_ID": "r", "MLFLOW_TRACKING_URI": "http://127.0.0.1:9"},
        retry_initial_s=0.05,
        retry_max_s=0.2,
        final_wait_s=1.0,
    )
    for step in range(3):
        sink.log([{"time": 1.0, "step": step, "metrics": {"loss": 1.0, "acc": 0.5}}])
    sink.close()
    assert sink.behind and sink.logged == 0 and sink.undelivered == 6 and sink.failures >= 2  # it kept trying
    err = capfd.readouterr().err
    assert err.count("cannot log the metrics to MLflow run r") == 1, err  # said once, not per attempt
    assert "6 metric points were not delivered to MLflow run r" in err, err


def test_a_driver_without_the_client_says_how_to_install_it_and_does_not_wait_at_the_end(capfd, monkeypatch):
    monkeypatch.setitem(sys.modules, "mlflow.entities", None)  # what `import` sees where mlflow is not installed
    sink = MlflowMetricsSink({"MLFLOW_RUN_ID": "r", "MLFLOW_TRACKING_URI": "http://127.0.0.1:9"}, final_wait_s=60)
    sink.log([{"time": 1.0, "step": 1, "metrics": {"loss": 1.0}}])
    started = time.monotonic()
    sink.close()
    assert time.monotonic() - started < 10  # no outage to wait out
    err = capfd.readouterr().err
    assert "pip install 'airflow-provider-horovod[mlflow]'" in err and "1 metric point was not delivered" in err


def test_the_sink_buffers_through_a_server_restart_and_delivers_every_later_step(server, monkeypatch, capfd):
    """A real server stopped mid-training and started again on the same store and port (issue #34)."""
    from mlflow import MlflowClient

    try:
        run_id = MlflowClient(server.url).create_run("0").info.run_id
        monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
        sink = MlflowMetricsSink(
            {"MLFLOW_RUN_ID": run_id, "MLFLOW_TRACKING_URI": server.url},
            retry_initial_s=0.2,
            retry_max_s=1.0,
            final_wait_s=60,
        )
        with MetricsCollector(None, sink=sink, sink_interval_s=0.1, log_interval_s=60) as collector:

            def train(steps):
                for step in steps:
                    collector.add({"time": time.time(), "rank": 0, "step": step, "metrics": {"loss": 1.0 / step}})
                    time.sleep(0.02)

            train(range(1, 21))
            wait_until(lambda: sink.logged >= 20, "the first steps to be logged", timeout_s=30)
            server.stop()  # the outage: the steps of this time are kept
            train(range(21, 61))
            wait_until(lambda: sink.behind, "the sink to notice the outage", timeout_s=30)
            server.start()
            train(range(61, 93))
        history = sorted(MlflowClient(server.url).get_metric_history(run_id, "loss"), key=lambda m: m.step)
        assert [m.step for m in history] == list(range(1, 93))  # nothing lost, the last one the last report
        assert history[-1].value == 1.0 / 92
        err = capfd.readouterr().err
        assert err.count(f"cannot log the metrics to MLflow run {run_id}") == 1, err
        assert err.count(f"MLflow run {run_id} caught up") == 1, err
        assert "not delivered" not in err and sink.undelivered == 0
    finally:
        if not server.running:  # the module's server stays up for the tests after this one
            server.start()


def _tracked_run(mlflow_server, monkeypatch, conn_id: str):
    from airflow_provider_horovod.hooks.mlflow import MlflowHook

    monkeypatch.setenv(
        f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps({"conn_type": "http", "host": mlflow_server, "password": "tok"})
    )
    hook = MlflowHook(conn_id)
    return hook, hook.start_run("unit-killed", tags={}, params={})


def test_a_deferred_task_killed_by_a_user_ends_its_run_killed_from_the_trigger(mlflow_server, monkeypatch, tmp_path):
    import asyncio

    from airflow_provider_horovod.triggers.horovod import HorovodSparkJobTrigger
    from tests.unit.triggers.test_horovod import _FakeMaster

    hook, env = _tracked_run(mlflow_server, monkeypatch, "mlflow_k")
    master = _FakeMaster(lambda method, path: (200, {"action": "KillSubmissionResponse", "message": "submitted"}))
    try:
        trigger = HorovodSparkJobTrigger(
            submission_id="driver-1", rest_url=master.url, staging=str(tmp_path), timeout_s=5
        ).with_mlflow_run("mlflow_k", env["MLFLOW_RUN_ID"])
        asyncio.run(asyncio.wait_for(trigger.on_kill(), timeout=60))
    finally:
        master.close()
    assert master.requests == [("POST", "/v1/submissions/kill/driver-1")]
    run = hook.get_conn().get_run(env["MLFLOW_RUN_ID"])
    assert run.info.status == "KILLED" and run.info.end_time
    assert run.data.tags["horovod.error"] == (
        "killed while deferred (the task was marked failed or success, or cleared): driver driver-1 killed"
    )


class _TI:
    dag_id, task_id, run_id, map_index, try_number = "d", "t", "manual__1", -1, 1

    def __init__(self) -> None:
        self.xcom: dict = {}

    def xcom_push(self, key, value):
        self.xcom[key] = value


def test_the_operator_hands_its_run_to_the_trigger_and_ends_it_killed_when_killed(mlflow_server, monkeypatch):
    from airflow.providers.common.compat.sdk import TaskDeferred

    from airflow_provider_horovod.triggers.horovod import HorovodSparkJobTrigger

    hook, env = _tracked_run(mlflow_server, monkeypatch, "mlflow_o")
    op = HorovodRunnerOperator(task_id="t", python_callable=_train, mlflow_conn_id="mlflow_o")
    context = {"ti": _TI()}

    def the_try(ctx):
        op.observers.attached(ctx, {"mlflow_run_id": env["MLFLOW_RUN_ID"]})  # the job's run, as a retry keeps it
        with pytest.raises(TaskDeferred) as deferred:
            op.defer(
                trigger=HorovodSparkJobTrigger(submission_id="driver-1", rest_url="http://m:6066", staging="/s"),
                method_name="execute_complete",
            )
        kwargs = deferred.value.trigger.serialize()[1]
        assert (kwargs["mlflow_conn_id"], kwargs["mlflow_run_id"]) == ("mlflow_o", env["MLFLOW_RUN_ID"])
        # a sync task killed (marked failed, cleared): on_kill kills the job, and the try's error ends the run KILLED
        op.on_kill()
        raise RuntimeError("Spark driver driver-1 was killed by this task")

    with pytest.raises(RuntimeError):
        op._observed(context, the_try)
    assert context["ti"].xcom["mlflow_run_id"] == env["MLFLOW_RUN_ID"] and op.mlflow_run_url
    run = hook.get_conn().get_run(env["MLFLOW_RUN_ID"])
    assert run.info.status == "KILLED"
    assert run.data.tags["horovod.error"] == "RuntimeError: Spark driver driver-1 was killed by this task"


@pytest.mark.parametrize(
    ("job_status", "run_status"), [("FAILED", "FAILED"), ("ABANDONED", "KILLED"), ("RUNNING", "RUNNING")]
)
def test_a_retry_ends_the_run_of_a_job_that_ended_unwatched(mlflow_server, monkeypatch, job_status, run_status):
    from airflow_provider_horovod.operators._reporting import JobReporter
    from airflow_provider_horovod.operators.modes.base import DeployMode

    class StoredJob(DeployMode):  # the durable record's job, in the state the master would report
        def get_job_status(self, external_id, context):
            return job_status

        def is_job_active(self, status):
            return status == "RUNNING"

    hook, env = _tracked_run(mlflow_server, monkeypatch, "mlflow_r")
    op = HorovodRunnerOperator(task_id="t", python_callable=_train, mlflow_conn_id="mlflow_r")
    op._mode = StoredJob(
        None, None, JobReporter(log=op.log, conn_id=None, poll_interval_s=None, max_return_value_bytes=1024)
    )
    assert op.get_job_status({"submission_id": "driver-1", "mlflow_run_id": env["MLFLOW_RUN_ID"]}, {}) == job_status
    run = hook.get_conn().get_run(env["MLFLOW_RUN_ID"])
    assert run.info.status == run_status  # a job still running keeps its run for the reattach
    if run_status != "RUNNING":
        assert run.data.tags["horovod.error"].startswith(f"the job ended {job_status} with no try watching it")


@pytest.mark.parametrize(
    "conn, expected",
    [
        ("https://mlflow.example.com", {"MLFLOW_TRACKING_URI": "https://mlflow.example.com"}),  # conn_type https
        ("http://mlflow.example.com:5000", {"MLFLOW_TRACKING_URI": "http://mlflow.example.com:5000"}),
        (
            {"conn_type": "http", "host": "https://m.example.com", "extra": {"insecure_tls": "false"}},
            {"MLFLOW_TRACKING_URI": "https://m.example.com"},
        ),  # the string "false" is false
        (
            {"conn_type": "http", "host": "https://m.example.com", "extra": {"insecure_tls": "true"}},
            {"MLFLOW_TRACKING_URI": "https://m.example.com", "MLFLOW_TRACKING_INSECURE_TLS": "true"},
        ),
        (
            {
                "conn_type": "http",
                "host": "https://m.example.com",
                "password": "tok",
                "extra": {"ca_bundle": "/etc/ca.pem"},
            },
            {
                "MLFLOW_TRACKING_URI": "https://m.example.com",
                "MLFLOW_TRACKING_TOKEN": "tok",
                "MLFLOW_TRACKING_SERVER_CERT_PATH": "/etc/ca.pem",
            },
        ),
    ],
)
def test_the_connection_becomes_mlflows_own_environment(conn, expected, monkeypatch):
    from airflow_provider_horovod.hooks.mlflow import MlflowHook, _verify

    monkeypatch.setenv("AIRFLOW_CONN_MLFLOW_ENV", conn if isinstance(conn, str) else json.dumps(conn))
    env = MlflowHook("mlflow_env").tracking_env()
    assert env == expected
    # the triggerer's own requests (end_run_async) verify as MLflow's client does
    assert _verify(env) == (
        "/etc/ca.pem" if "MLFLOW_TRACKING_SERVER_CERT_PATH" in env else "MLFLOW_TRACKING_INSECURE_TLS" not in env
    )
    # the driver's metrics sink takes the same credentials and TLS settings into its MLflow client's environment
    from airflow_provider_horovod.runtime.mlflow_sink import MlflowMetricsSink

    sink = MlflowMetricsSink({**env, "MLFLOW_RUN_ID": "r"})
    assert sink._env == {k: v for k, v in env.items() if k != "MLFLOW_TRACKING_URI"}


def test_each_restart_within_the_try_is_a_point_of_the_runs_restarts_metric(server):
    """max_restarts (issue #36): one MLflow run per try; each restart is the ``restarts`` metric's next value at the
    step the failed attempt reached, beside the training's own metrics."""
    from mlflow import MlflowClient

    from airflow_provider_horovod.runtime.driver.metrics import RESTARTS_METRIC
    from airflow_provider_horovod.runtime.driver.restarts import RestartBudget
    from airflow_provider_horovod.runtime.rank_errors import rank_failed

    run_id = MlflowClient(server.url).create_run("0").info.run_id
    sink = MlflowMetricsSink({"MLFLOW_RUN_ID": run_id, "MLFLOW_TRACKING_URI": server.url}, final_wait_s=30)
    budget = RestartBudget(2)
    with MetricsCollector(None, sink=sink, sink_interval_s=0.1, log_interval_s=60) as collector:
        for step in (1, 2, 3):
            collector.add({"time": time.time(), "rank": 0, "step": step, "metrics": {"loss": 1.0 / step}})
        collector.restart(budget.next_restart(rank_failed(rank=1, exit_code=-9), step=3).to_dict())
        collector.add({"time": time.time(), "rank": 0, "step": 3, "metrics": {"loss": 0.3}})  # resumed at 2
        collector.restart(budget.next_restart(rank_failed(rank=0, exit_code=-9), step=3).to_dict())
        collector.finish("finished")
    history = MlflowClient(server.url).get_metric_history(run_id, RESTARTS_METRIC)
    assert sorted((m.step, m.value) for m in history) == [(3, 1.0), (3, 2.0)]
    assert len(MlflowClient(server.url).get_metric_history(run_id, "loss")) == 4
