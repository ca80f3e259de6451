"""
One table of bad values, refused with one message by every entry point: ``HorovodRunner``, the operators
(``HorovodRunnerOperator``, ``TorchDistributedOperator``), the decorators (``@task.horovod``,
``@task.torch_distributed``), the hooks' :class:`JobSettings` and the driver program's flags (issues #23, #24).
"""

from __future__ import annotations

import inspect
from dataclasses import fields

import pendulum
import pytest
from airflow.sdk import DAG

from airflow_provider_horovod.decorators.horovod import horovod_task
from airflow_provider_horovod.decorators.torch_distributed import torch_distributed_task
from airflow_provider_horovod.operators.horovod import HorovodRunnerOperator
from airflow_provider_horovod.operators.torch_distributed import TorchDistributedOperator
from airflow_provider_horovod.runtime import HorovodRunner
from airflow_provider_horovod.runtime.driver.program import _settings
from airflow_provider_horovod.runtime.settings import JobSettings

BAD = [
    ("np", 0),
    ("np", True),
    ("np", "2"),
    ("np", 1.5),
    ("np", None),
    ("driver_log_verbosity", "loud"),
    ("driver_log_verbosity", None),
    ("gloo_timeout_s", True),
    ("gloo_timeout_s", 0),
    ("gloo_timeout_s", -1),
    ("gloo_timeout_s", 1.5),
    ("gloo_timeout_s", "30"),
    ("start_timeout_s", 0),
    ("start_timeout_s", -1),
    ("start_timeout_s", True),
    ("start_timeout_s", "60"),
    ("training_timeout_s", 0),
    ("training_timeout_s", True),
    ("slot_wait_timeout_s", 0),
    ("slot_wait_timeout_s", -5),
    ("slot_wait_timeout_s", True),
    ("use_gpu", "yes"),
    ("use_gpu", 1),
    ("use_gpu", None),
    ("gpu_visibility", "all"),
    ("gpu_visibility", None),
    ("timeline", "yes"),
    ("timeline", 1),
    ("max_return_value_bytes", 0),
    ("max_return_value_bytes", -1),
    ("max_return_value_bytes", True),
    ("max_return_value_bytes", 1.5),
    ("max_return_value_bytes", None),
    ("launcher", "mpi"),
    ("launcher", "Torch"),
    ("launcher", None),
    ("launcher", 1),
    ("max_restarts", -1),
    ("max_restarts", True),
    ("max_restarts", 1.5),
    ("max_restarts", None),
    ("restart_on", 42),
    ("restart_on", ["not a name"]),
    ("restart_on", [3]),
    ("heartbeat_timeout_s", 0),
    ("heartbeat_timeout_s", 5.9),  # under three 2-second heartbeats
    ("heartbeat_timeout_s", True),
    ("heartbeat_timeout_s", "30"),
    ("min_np", 0),
    ("min_np", 3),  # above np=2
    ("min_np", True),
    ("min_np", 1.0),
    ("elastic_wait_s", 0),
    ("elastic_wait_s", None),
    ("elastic_wait_s", "30"),
]


def train():
    return 1


def _message(call) -> str:
    with pytest.raises(ValueError) as raised:
        call()
    return str(raised.value)


def _decorated(decorator=horovod_task, **kwargs):
    with DAG("settings_table", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC")):
        decorator(train, task_id="train", **kwargs)()


@pytest.mark.parametrize(("name", "value"), BAD, ids=[f"{n}={v!r}" for n, v in BAD])
def test_every_entry_point_refuses_the_same_value_with_the_same_message(name, value):
    kwargs = {"np": 2, name: value}
    expected = _message(lambda: JobSettings(**kwargs))  # what the hooks are given
    assert name in expected  # the message names the parameter
    assert _message(lambda: HorovodRunner(**kwargs)) == expected
    assert _message(lambda: HorovodRunnerOperator(task_id="t", python_callable=train, **kwargs)) == expected
    assert _message(lambda: _decorated(**kwargs)) == expected
    assert _message(lambda: TorchDistributedOperator(task_id="t", python_callable=train, **kwargs)) == expected
    assert _message(lambda: _decorated(torch_distributed_task, **kwargs)) == expected


def test_every_entry_point_refuses_the_timeline_with_the_torch_launcher_alike():
    expected = _message(lambda: JobSettings(np=2, timeline=True, launcher="torch"))
    assert "timeline" in expected and "launcher='horovod'" in expected
    assert _message(lambda: HorovodRunner(np=2, timeline=True, launcher="torch", artifact_dir="/tmp")) == expected
    assert (
        _message(lambda: HorovodRunnerOperator(task_id="t", python_callable=train, timeline=True, launcher="torch"))
        == expected
    )
    assert _message(lambda: TorchDistributedOperator(task_id="t", python_callable=train, timeline=True)) == expected
    assert _message(lambda: _decorated(torch_distributed_task, timeline=True)) == expected


def test_the_driver_program_refuses_an_unknown_launcher_naming_it():
    assert (
        _message(lambda: _settings(["--np", "2", "--launcher", "mpi"]))
        == "launcher must be one of ('horovod', 'torch'), got 'mpi'"
    )


@pytest.mark.parametrize(
    ("name", "value"),
    [(n, v) for n, v in BAD if isinstance(v, int) and not isinstance(v, bool) and n not in ("use_gpu", "timeline")],
)
def test_the_driver_program_refuses_out_of_range_flags_naming_them(name, value):
    # flags come from checked settings (JobSettings.to_args); one out of range is refused all the same
    message = _message(lambda: _settings(["--np", "2", f"--{name.replace('_', '-')}", str(value)]))
    assert message.startswith(f"{name} must be "), message


def test_settings_survive_the_driver_program_s_flags():
    for settings in (
        JobSettings(np=2),
        JobSettings(
            np=-3,
            driver_log_verbosity="all",
            gloo_timeout_s=30,
            start_timeout_s=None,
            training_timeout_s=90.5,
            slot_wait_timeout_s=None,
            use_gpu=True,
            gpu_visibility="rank",
            timeline=True,
            max_return_value_bytes=1000,
        ),
        JobSettings(np=2, launcher="torch", use_gpu=True),
        JobSettings(np=2, max_restarts=3, restart_on=("ValueError", "torch.OutOfMemoryError")),
        JobSettings(np=2, max_restarts=1, restart_on="*"),
        JobSettings(np=2, heartbeat_timeout_s=None),
        JobSettings(np=2, heartbeat_timeout_s=6),
        JobSettings(np=4, max_restarts=2, min_np=2, elastic_wait_s=5.5),
    ):
        assert _settings(settings.to_args()) == settings


def test_the_runner_and_the_operator_normalise_alike():
    runner = HorovodRunner(np=2, start_timeout_s=60, slot_wait_timeout_s=10)
    operator = HorovodRunnerOperator(
        task_id="t",
        python_callable=train,
        np=2,
        start_timeout_s=60,
        slot_wait_timeout_s=10,
        max_return_value_bytes=64 * 2**20,
    )
    assert operator.job_settings() == runner.settings
    assert runner.settings.start_timeout_s == 60.0 and isinstance(runner.settings.start_timeout_s, float)


def test_settings_from_arguments_take_the_fields_among_them_and_check_them():
    arguments = {"self": object(), "np": -2, "launcher": "torch", "gloo_timeout_s": 30, "env": {"A": "1"}}
    assert JobSettings.from_arguments(arguments) == JobSettings(np=-2, launcher="torch", gloo_timeout_s=30)
    with pytest.raises(ValueError, match="np"):
        JobSettings.from_arguments({"np": 0})


def test_the_runner_takes_every_setting_as_an_argument_of_its_own_name():
    # HorovodRunner builds its settings with JobSettings.from_arguments(locals()): a field it lacked would be dropped
    assert {f.name for f in fields(JobSettings)} <= set(inspect.signature(HorovodRunner).parameters)
    runner = HorovodRunner(np=-3, timeline=True, artifact_dir="/tmp/a", checkpoint_dir="/tmp/c", try_number=2)
    assert runner.settings == JobSettings(np=-3, timeline=True, checkpoint_dir="/tmp/c", try_number=2)


def test_restart_on_takes_exception_classes_and_names_as_the_ranks_report_them():
    class Preempted(Exception):
        pass

    settings = JobSettings(np=2, restart_on=[ValueError, Preempted, "torch.OutOfMemoryError"])
    assert settings.restart_on == (
        "ValueError",
        f"{__name__}.test_restart_on_takes_exception_classes_and_names_as_the_ranks_report_them.<locals>.Preempted",
        "torch.OutOfMemoryError",
    )
    assert JobSettings(np=2, restart_on="ValueError").restart_on == ("ValueError",)
    operator = HorovodRunnerOperator(task_id="t", python_callable=train, max_restarts=2, restart_on=[KeyError])
    assert (operator.job_settings().max_restarts, operator.job_settings().restart_on) == (2, ("KeyError",))


def test_min_np_is_refused_for_ranks_on_the_driver_naming_why():
    message = _message(lambda: HorovodRunner(np=-2, min_np=1))
    assert message == _message(lambda: JobSettings(np=-2, min_np=1))
    assert message.startswith("min_np applies to barrier tasks (np > 0)"), message
    assert JobSettings(np=4, min_np=4).min_np == 4  # np itself: never fewer (allowed, and the same as None)


def test_min_np_below_np_without_restarts_is_refused_naming_max_restarts():
    message = _message(lambda: JobSettings(np=4, min_np=2))  # max_restarts=0: min_np would never act
    assert message == _message(lambda: HorovodRunner(np=4, min_np=2))
    assert message.startswith("min_np=2 only acts when the job restarts within the try") and message.endswith(
        "set max_restarts to 1 or more, got max_restarts=0"
    ), message
    assert JobSettings(np=4, min_np=2, max_restarts=1).min_np == 2
