"""Bad arguments fail at once, naming the parameter and the allowed values."""

from __future__ import annotations

import pytest

from airflow_provider_horovod.operators.horovod import HorovodRunnerOperator
from airflow_provider_horovod.runtime import HorovodRunner


def train():
    return 1


@pytest.mark.parametrize("np", [0, 1.5, "2", None, True])
def test_runner_rejects_bad_np(np):
    with pytest.raises(ValueError, match=r"np must be a non-zero int"):
        HorovodRunner(np=np)


def test_runner_np_zero_explains_why():
    with pytest.raises(ValueError, match="slot count is unreliable"):
        HorovodRunner(np=0)


def test_runner_rejects_unknown_verbosity():
    with pytest.raises(ValueError, match=r"driver_log_verbosity must be one of \('log_callback_only', 'all'\)"):
        HorovodRunner(np=2, driver_log_verbosity="verbose")


def test_runner_accepts_negative_np_and_keyword_only():
    assert HorovodRunner(np=-3).np == -3
    with pytest.raises(TypeError):
        HorovodRunner(2)  # type: ignore[misc]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"np": 0}, r"np must be a non-zero int"),
        ({"np": "4"}, r"np must be a non-zero int"),
        ({"driver_log_verbosity": "debug"}, r"driver_log_verbosity must be one of"),
        ({"conf": ["a=b"]}, r"conf must be a dict"),
        ({"env_vars": "A=1"}, r"env_vars must be a dict"),
        ({"gloo_timeout_s": 0}, r"gloo_timeout_s must be a positive int \(seconds\)"),
        ({"max_return_value_bytes": -1}, r"max_return_value_bytes must be a positive int"),
        ({"conf": {"spark.dynamicAllocation.enabled": "true"}}, r"spark.dynamicAllocation.enabled.*Allowed: false"),
        (
            {"spark_submit_kwargs": {"py_files": "x.zip", "executor_memory": "1g"}},
            r"spark_submit_kwargs: \['py_files'\] are set by the provider",
        ),
    ],
)
def test_operator_rejects_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        HorovodRunnerOperator(task_id="t", python_callable=train, **kwargs)


def test_operator_rejects_non_callable():
    with pytest.raises(TypeError, match="python_callable must be callable"):
        HorovodRunnerOperator(task_id="t", python_callable="train")  # type: ignore[arg-type]


def test_operator_construction_does_no_io(monkeypatch):
    """No connection lookup, no hook, no files in __init__."""
    import airflow_provider_horovod.hooks.horovod as hook_module

    def boom(*a, **k):
        raise AssertionError("I/O in the constructor")

    monkeypatch.setattr(hook_module.HorovodHook, "get_connection", boom)
    op = HorovodRunnerOperator(task_id="t", python_callable=train, np=2, op_kwargs={"x": "{{ ds }}"})
    assert "hook" not in op.__dict__
    assert set(op.template_fields) >= {"op_args", "op_kwargs", "conf", "env_vars", "artifact_dir"}


def test_unpicklable_callable_is_refused_before_anything_is_submitted(tmp_path):
    """The operator names the culprit and raises before any connection, file or Spark work."""
    import threading
    from types import SimpleNamespace

    from airflow_provider_horovod.exceptions import HorovodJobError

    lock = threading.Lock()

    def train_with_lock():
        with lock:
            return 1

    pushed: list = []
    ti = SimpleNamespace(
        dag_id="d", run_id="r", task_id="t", try_number=1, map_index=-1, xcom_push=lambda key, value: pushed.append(key)
    )
    op = HorovodRunnerOperator(task_id="t", python_callable=train_with_lock, artifact_dir=str(tmp_path / "art"))
    with pytest.raises(HorovodJobError, match=r"culprit is closure variable 'lock' of .*train_with_lock"):
        op.execute({"ti": ti})
    assert pushed == [] and "hook" not in op.__dict__ and not (tmp_path / "art").exists()


def test_negative_np_over_spark_connect_is_refused(monkeypatch, tmp_path):
    import json
    from types import SimpleNamespace

    from airflow_provider_horovod.exceptions import HorovodJobError

    monkeypatch.setenv(
        "AIRFLOW_CONN_MY_CONNECT", json.dumps({"conn_type": "spark_connect", "host": "127.0.0.1", "port": 15002})
    )
    op = HorovodRunnerOperator(
        task_id="t", python_callable=train, np=-2, conn_id="my_connect", artifact_dir=str(tmp_path)
    )
    with pytest.raises(HorovodJobError, match=r"np=-2: over Spark Connect .* use np > 0"):
        op.execute(
            {
                "ti": SimpleNamespace(
                    dag_id="d", run_id="r", task_id="t", try_number=1, map_index=-1, xcom_push=lambda key, value: None
                )
            }
        )
