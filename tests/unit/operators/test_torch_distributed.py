"""
``TorchDistributedOperator`` and ``@task.torch_distributed`` when the DAG is parsed, and the ``launcher`` setting on
its way to the driver program in each deploy mode: the real spark-submit command line (client), the real REST
submission (standalone cluster), the runner a Spark Connect hook builds.
"""

from __future__ import annotations

import pendulum
import pytest
from airflow.sdk import DAG, task

from airflow_provider_horovod.decorators.torch_distributed import torch_distributed_task
from airflow_provider_horovod.job import TrainingJob
from airflow_provider_horovod.operators.base import DistributedTrainingOperator
from airflow_provider_horovod.operators.horovod import HorovodRunnerOperator
from airflow_provider_horovod.operators.torch_distributed import TorchDistributedOperator
from airflow_provider_horovod.runtime.driver.program import _parse, _settings
from airflow_provider_horovod.runtime.driver.runner import BarrierRunner
from airflow_provider_horovod.runtime.rank.script import run_script
from airflow_provider_horovod.runtime.settings import JobSettings
from airflow_provider_horovod.runtime.wire.payload import loads_payload


def train(x=1):
    return x


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "train.py"
    path.write_text("import os\nprint(os.environ['RANK'])\n")
    return path


def _dag():
    return DAG("torch_parse", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"))


def test_the_operator_and_the_decorator_run_the_torch_launcher():
    op = TorchDistributedOperator(task_id="t", python_callable=train, np=-2)
    assert op.job_settings() == JobSettings(np=-2, launcher="torch", max_return_value_bytes=2**20)
    with _dag():
        decorated = task.torch_distributed(np=2, multiple_outputs=True)(train)().operator  # the registered name
    assert decorated.custom_operator_name == "@task.torch_distributed"
    assert isinstance(decorated, TorchDistributedOperator) and decorated.job_settings().launcher == "torch"
    # siblings over one base: neither operator is the other
    assert not isinstance(decorated, HorovodRunnerOperator) and not issubclass(
        HorovodRunnerOperator, TorchDistributedOperator
    )
    assert TorchDistributedOperator.__bases__ == HorovodRunnerOperator.__bases__ == (DistributedTrainingOperator,)
    assert HorovodRunnerOperator(task_id="h", python_callable=train).job_settings().launcher == "horovod"
    assert (
        HorovodRunnerOperator(task_id="h", python_callable=train, launcher="torch").job_settings().launcher == "torch"
    )


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        (
            {},
            ValueError,
            "give one of python_callable (a training function) or script (the path of a torchrun "
            "training script); got neither",
        ),
        ({"python_callable": "train"}, TypeError, "python_callable must be callable, got str"),
        (
            {"python_callable": train, "launcher": "horovod"},
            ValueError,
            "launcher must be 'torch' for TorchDistributedOperator and @task.torch_distributed, got 'horovod'",
        ),
        (
            {"python_callable": train, "script_args": ["--epochs", "2"]},
            ValueError,
            "script_args are the command-line arguments of script=",
        ),
        ({"script": 3}, ValueError, "script must be the path of a Python training script, got int"),
    ],
)
def test_bad_arguments_fail_when_the_dag_is_parsed_naming_the_parameter(kwargs, error, message):
    with pytest.raises(error) as raised:
        TorchDistributedOperator(task_id="t", **kwargs)
    assert str(raised.value).startswith(message), raised.value


def test_a_script_must_exist_and_comes_alone(script, tmp_path):
    missing = tmp_path / "nowhere" / "train.py"
    with pytest.raises(ValueError, match=rf"^script: no training script at '{missing}'"):
        TorchDistributedOperator(task_id="t", script=str(missing))
    with pytest.raises(ValueError, match="got both"):
        TorchDistributedOperator(task_id="t", script=script, python_callable=train)
    with pytest.raises(ValueError, match="op_args/op_kwargs are python_callable's arguments"):
        TorchDistributedOperator(task_id="t", script=script, op_args=[1])


def test_a_script_ships_as_run_script_with_its_rendered_arguments_as_strings(script):
    op = TorchDistributedOperator(task_id="t", script=script, script_args=["--epochs", 3, "{{ ds }}"])
    assert "script_args" in op.template_fields
    op.script_args[2] = "2026-01-01"  # what rendering the template field does
    key, payload = op._payload()
    fn, args, kwargs = loads_payload(payload, key=key)
    assert fn is run_script and args == (str(script), ["--epochs", "3", "2026-01-01"]) and kwargs == {}


def test_the_decorator_refuses_another_launcher_and_the_timeline():
    with pytest.raises(ValueError, match="got 'horovod'; use HorovodRunnerOperator or @task.horovod"), _dag():
        torch_distributed_task(train, task_id="t", launcher="horovod")()
    with (
        pytest.raises(ValueError, match="timeline=True records the Horovod Timeline and needs launcher='horovod'"),
        _dag(),
    ):
        torch_distributed_task(train, task_id="t2", timeline=True)()


def _driver_settings(args: list[str]) -> JobSettings:
    """The settings the driver program reads from its command line (from ``--payload`` on)."""
    namespace, rest = _parse(args[args.index("--payload") :])
    return _settings(rest)


class _TI:
    """The task instance fields a try's job is named from."""

    def __init__(self, task_id: str) -> None:
        self.dag_id, self.run_id, self.task_id, self.map_index, self.try_number = "d", "manual__1", task_id, -1, 1


class _Submitted(Exception):
    pass


def test_client_mode_s_spark_submit_command_carries_the_launcher(tmp_path, monkeypatch):
    from airflow_provider_horovod.hooks import horovod as client

    seen: list[list[str]] = []

    def submit(self, application, **kwargs):
        seen.append(self._build_spark_submit_command(application))
        raise _Submitted

    monkeypatch.setattr(client._SparkSubmit, "submit", submit)
    op = TorchDistributedOperator(task_id="t", python_callable=train, np=2, conn_id=None)
    (tmp_path / "payload.bin").write_bytes(b"p")
    with pytest.raises(_Submitted):
        job = TrainingJob(key=b"k" * 32, payload=b"p", artifact_dir=str(tmp_path / "art"), settings=op.job_settings())
        client.HorovodHook(conn_id=None).run_job(
            job, payload_path=str(tmp_path / "payload.bin"), staging_dir=str(tmp_path)
        )
    [command] = seen
    assert "--launcher" in command and _driver_settings(command) == op.job_settings()


def test_cluster_mode_s_rest_submission_carries_the_launcher(tmp_path):
    from airflow_provider_horovod.standalone.submission import driver_submission
    from airflow_provider_horovod.utils.staging import Staging

    op = TorchDistributedOperator(
        task_id="t",
        python_callable=train,
        np=2,
        deploy_mode="cluster",
        deferrable=True,
        use_gpu=True,
        gpu_visibility="rank",
    )  # GPU scheduling travels alike
    submission = driver_submission(
        Staging(tmp_path),
        master_url="spark://127.0.0.1:7077",
        master_ui_url="http://127.0.0.1:8080",
        name="n",
        np=2,
        conf={},
        env_vars={},
        key=b"k" * 32,
        artifact_dir=str(tmp_path / "art"),
        settings=op.job_settings(),
    )
    settings = _driver_settings(submission.app_args)
    assert settings == op.job_settings() and (settings.launcher, settings.use_gpu, settings.gpu_visibility) == (
        "torch",
        True,
        "rank",
    )


def test_spark_connect_s_runner_carries_the_launcher():
    op = TorchDistributedOperator(task_id="t", python_callable=train, np=2)
    runner = BarrierRunner(op.job_settings(), artifact_dir="/tmp/art")  # HorovodConnectHook.run's
    assert runner.settings.launcher == "torch" and runner.settings == op.job_settings()


def test_the_spark_application_s_default_name_says_the_launcher():
    with DAG(dag_id="d", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC")):
        torch_op = TorchDistributedOperator(task_id="fit", python_callable=train, np=2, conn_id=None)
        hvd_op = HorovodRunnerOperator(task_id="fit_hvd", python_callable=train, np=2, conn_id=None)
    names = [op.training_job({"ti": _TI(op.task_id)}).app_name for op in (torch_op, hvd_op)]
    assert names == ["airflow-torch-d-fit", "airflow-horovod-d-fit_hvd"]
