"""
User code of every ordinary shape through a real Airflow deployment (scheduler, LocalExecutor, api-server).

``airflow dags test`` hands the operator the DAG file's objects from the process that parsed it; a real worker
parses the file again in a task process under the module name ``unusual_prefix_<hash>_<file>``, which is where
callables that are not plain functions used to fail (issue #10). One deployment for the module, one run per DAG,
one task at a time.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.airflow_deployment import AirflowDeployment, airflow_deployment, copy_dags

# A run's tasks go one at a time (about 15-20 s each on 2 idle cores, 45 s on a loaded machine); the first test of
# each DAG also waits for its run (and the first one for the deployment to start).
pytestmark = [pytest.mark.e2e, pytest.mark.spark, pytest.mark.timeout(900)]

DAGS = Path(__file__).resolve().parent / "dags"
SHAPES_DAG = "horovod_callable_shapes"
USER_CODE_DAG = "horovod_user_code"
RUN_TIMEOUT_S = 600

SHAPES = {
    "partial": {"lr": 0.05, "epochs": 2, "size": 2},
    "nested_partial": {"config": "lr=0.1", "epochs": 30, "tag": "nested", "size": 2, "sum": 3.0},
    "bound_method": {"lr": 0.2, "epochs": 60, "cls": "Trainer", "size": 2, "sum": 3.0},
    "callable_instance": {
        "lr": 0.3,
        "scaled": 70,
        "total": 8,
        "helper": "helped:7",
        "config": "lr=0.4",
        "tags": ["a", "b"],
        "size": 2,
        "sum": 3.0,
    },
    "staticmethod": {"static": 30, "described": "Trainer:3", "size": 2, "sum": 3.0},
    "lambda": {"lr": 0.01, "epochs": 1, "size": 2},
}
"""Task id -> rank 0's return value. The callable of each task is one shape; arguments carry more shapes (a lambda,
a closure, a class method, DAG-file objects)."""

INTERNAL_NAMES = ("result.pkl", "FileNotFoundError", "collectAndServe")


@pytest.fixture(scope="module")
def airflow(tmp_path_factory: pytest.TempPathFactory):
    dags = copy_dags(
        tmp_path_factory.mktemp("real-worker-dags"),
        DAGS / "horovod_callable_shapes.py",
        DAGS / "helper_only_on_driver.py",
        DAGS / "horovod_retry_policy.py",
    )
    # one Spark job at a time (the DAGs' max_active_tasks=1, and parallelism 1 in case both DAGs have a run): two at
    # once on 2 cores took 4x longer each. No triggerer: nothing here defers.
    with airflow_deployment(
        dags,
        home=tmp_path_factory.mktemp("real-worker-home"),
        extra_env={"AIRFLOW__CORE__PARALLELISM": "1"},
        components=("api-server", "scheduler", "dag-processor"),
    ) as deployment:
        yield deployment


class FinishedRun:
    """One run of a DAG, triggered and waited for; its task states, XComs and failures."""

    def __init__(self, airflow: AirflowDeployment, dag_id: str) -> None:
        self.airflow, self.dag_id = airflow, dag_id
        self.run_id = airflow.trigger(dag_id)
        self.state = airflow.wait_for_run(dag_id, self.run_id, timeout_s=RUN_TIMEOUT_S)
        tis = airflow.task_instances(dag_id, self.run_id)
        self.states = {ti["task_id"]: ti.get("state") for ti in tis}
        durations = ", ".join(f"{ti['task_id']} {ti.get('duration') or 0:.0f} s" for ti in tis)
        print(f"{dag_id}: {self.state}; task durations: {durations}")  # shown with pytest -rP / -s

    def xcom(self, task_id: str, key: str = "return_value", default=KeyError):
        return self.airflow.xcom(self.dag_id, self.run_id, task_id, key, default=default)

    def error(self, task_id: str) -> str:
        """The exception that failed the task, ``"Type: message"``, from its log."""
        return self.airflow.task_error(self.dag_id, self.run_id, task_id) or ""

    def headline(self, task_id: str) -> str:
        return self.error(task_id).splitlines()[0] if self.error(task_id) else ""

    def log(self, task_id: str) -> str:
        return self.airflow.task_log(self.dag_id, self.run_id, task_id)

    def why(self, task_id: str) -> str:
        return f"{task_id}: {self.states.get(task_id)}; error: {self.error(task_id)[:3000]}"


@pytest.fixture(scope="module")
def shapes_run(airflow) -> FinishedRun:
    return FinishedRun(airflow, SHAPES_DAG)


@pytest.fixture(scope="module")
def user_code_run(airflow) -> FinishedRun:
    return FinishedRun(airflow, USER_CODE_DAG)


def test_the_deployment_answers_on_loopback_only(airflow):
    listening = airflow.listening()
    assert any(port == airflow.port for _ip, port, _pid, _cmd in listening), listening
    assert all(ip == "127.0.0.1" for ip, _port, _pid, _cmd in listening), listening


# --- issue #10 part 1: callables that are not plain functions ----------------------------------------------------


def test_every_callable_shape_runs_on_a_real_worker(shapes_run):
    failed = [shapes_run.why(t) for t, s in shapes_run.states.items() if s != "success"]
    assert not failed, "\n".join(failed)
    assert shapes_run.state == "success"
    assert set(shapes_run.states) == set(SHAPES)
    for task_id, expected in SHAPES.items():
        assert shapes_run.xcom(task_id) == expected, task_id


# --- issue #10 parts 2-4: the user's own hvd.init, SystemExit, os._exit, KeyboardInterrupt, missing modules -------


@pytest.mark.parametrize("task_id", ["process_sets", "init_shutdown_init"])
def test_the_functions_own_hvd_init_is_honoured(user_code_run, task_id):
    assert user_code_run.states[task_id] == "success", user_code_run.why(task_id)
    assert user_code_run.xcom(task_id) == {"ok": True, "size": 2}


@pytest.mark.parametrize("task_id", ["sys_exit_zero", "raise_system_exit"])
def test_exit_status_zero_on_every_rank_is_success_with_none(user_code_run, task_id):
    assert user_code_run.states[task_id] == "success", user_code_run.why(task_id)
    assert user_code_run.xcom(task_id, default=None) is None


def test_sys_exit_three_on_one_rank_names_the_rank_and_status(user_code_run):
    task_id = "sys_exit_three_on_rank_one"
    assert user_code_run.states[task_id] == "failed", user_code_run.why(task_id)
    headline = user_code_run.headline(task_id)
    assert "Horovod rank 1" in headline and "exit code 3" in headline, user_code_run.error(task_id)
    log = user_code_run.log(task_id)
    leaked = [name for name in INTERNAL_NAMES if name in log]
    assert not leaked, f"internal names {leaked} in the task log:\n{log[-6000:]}"


def test_os_exit_in_one_rank_names_the_rank_and_status(user_code_run):
    task_id = "os_exit_seven_on_rank_one"
    assert user_code_run.states[task_id] == "failed", user_code_run.why(task_id)
    headline = user_code_run.headline(task_id)
    assert "rank 1" in headline and "exit code 7" in headline, user_code_run.error(task_id)


def test_a_module_missing_on_the_executors_is_named_first(user_code_run):
    task_id = "imports_driver_only_module"
    assert user_code_run.states[task_id] == "failed", user_code_run.why(task_id)
    headline = user_code_run.headline(task_id)
    assert "No module named 'helper_only_on_driver'" in headline, user_code_run.error(task_id)
    assert "timed out" not in headline


def test_keyboard_interrupt_in_a_rank_names_the_rank(user_code_run):
    task_id = "keyboard_interrupt_on_rank_zero"
    assert user_code_run.states[task_id] == "failed", user_code_run.why(task_id)
    headline = user_code_run.headline(task_id)
    assert "rank 0" in headline and "KeyboardInterrupt" in headline, user_code_run.error(task_id)


def test_the_training_retry_policy_retries_a_killed_rank_and_not_the_code_s_own_exception(airflow):
    """retries=2 and ``retry_policy=training_retry_policy()`` (Airflow 3.3, issue #36): the rank's ValueError fails
    the task in its first try; a rank SIGKILLed in the first try is retried and succeeds."""
    run = FinishedRun(airflow, "horovod_retry_policy")
    tries = airflow.tries("horovod_retry_policy", run.run_id)
    assert run.states["code_bug"] == "failed" and tries["code_bug"] == 1, run.why("code_bug")
    assert "ValueError: corrupt shard on rank 1" in run.error("code_bug")
    assert run.states["killed_rank"] == "success" and tries["killed_rank"] == 2, run.why("killed_rank")
    assert run.xcom("killed_rank") == 2
    # the policy's word in try 1's log, as Airflow records it (the event and its action and reason keys)
    decisions = {
        task_id: [
            (r.get("action"), r.get("reason"))
            for r in airflow.task_log_events("horovod_retry_policy", run.run_id, task_id)
            if r.get("event") == "Retry policy decision"
        ]
        for task_id in ("code_bug", "killed_rank")
    }
    assert decisions == {
        "code_bug": [("fail", "HorovodJobError: the training code's own exception; a retry would raise it again")],
        "killed_rank": [
            ("retry", "HorovodRankKilledError: an infrastructure failure; the retry resumes from the latest checkpoint")
        ],
    }, decisions
