"""``max_return_value_bytes`` reaches rank 0, which refuses a larger value before it is sent (issue #22, item 2)."""

from __future__ import annotations

import pickle

import cloudpickle
import pytest

from airflow_provider_horovod.exceptions import HorovodResultError
from airflow_provider_horovod.operators.common import check_xcom_value
from airflow_provider_horovod.operators.horovod import HorovodRunnerOperator
from airflow_provider_horovod.runtime import HorovodRunner, ReturnValueTooLargeError
from airflow_provider_horovod.runtime.driver.program import _parse, _settings
from airflow_provider_horovod.runtime.driver.runner import BarrierRunner
from airflow_provider_horovod.runtime.errors import ReturnValueRefused
from airflow_provider_horovod.runtime.rank.result import pickle_result


def train():
    return 1


@pytest.mark.parametrize("value", [0, -1, True, "x", 1.5, None])
def test_runner_refuses_a_bad_limit_naming_the_parameter(value):
    with pytest.raises(ValueError, match=r"max_return_value_bytes must be a positive int \(bytes\), got "):
        HorovodRunner(np=2, max_return_value_bytes=value)


def test_runner_limit_defaults_to_64_mib():
    assert HorovodRunner(np=2).settings.max_return_value_bytes == 64 * 2**20
    assert HorovodRunner(np=-2, max_return_value_bytes=1000).settings.max_return_value_bytes == 1000


def test_rank0_writes_a_value_within_the_limit_and_a_refusal_above_it(capsys):
    value = {"model": b"x" * 200_000, "loss": 0.1}
    data = cloudpickle.dumps(value)
    assert pickle_result(value, None) == data
    assert pickle_result(value, len(data)) == data  # the limit itself passes
    written = pickle_result(value, 1000)
    refused = pickle.loads(written)
    assert isinstance(refused, ReturnValueRefused)
    assert (refused.size, refused.limit, refused.type_name) == (len(data), 1000, "dict")  # the exact pickle size
    assert len(written) < 300  # nothing large crosses the JVMs
    assert (
        f"rank 0's return value (a dict) is {len(data)} bytes pickled, above max_return_value_bytes=1000: it "
        "is not sent to the driver"
    ) in capsys.readouterr().err
    with pytest.raises(TypeError, match="pickle"):
        pickle_result(__import__("threading").Lock(), 1000)


def test_run_raises_on_the_refusal_with_both_sizes(monkeypatch):
    runner = HorovodRunner(np=2, max_return_value_bytes=1000)
    monkeypatch.setattr(
        runner, "run_payload", lambda payload: cloudpickle.dumps(ReturnValueRefused(5021, 1000, "bytes"))
    )
    with pytest.raises(ReturnValueTooLargeError) as info:
        runner.run(train)
    assert str(info.value).startswith(
        "rank 0 returned 5021 bytes once pickled (a bytes), above "
        "max_return_value_bytes=1000; it was not sent to the driver"
    )
    assert "artifact_dir()" in str(info.value)
    assert (info.value.size, info.value.limit) == (5021, 1000)


def test_the_operator_refuses_the_refusal_with_the_documented_message():
    with pytest.raises(HorovodResultError) as info:
        check_xcom_value(
            ReturnValueRefused(50_021, 2000, "bytes"), max_bytes=2000, artifact_paths=["/art/try-1/model.pt"]
        )
    assert str(info.value) == (
        "rank 0 returned 50021 bytes once serialized, above max_return_value_bytes=2000. Write large results under "
        "artifact_dir() and return their paths; the model files are kept: /art/try-1/model.pt"
    )


def test_the_limit_reaches_the_driver_in_every_deploy_mode(tmp_path, monkeypatch):
    op = HorovodRunnerOperator(task_id="t", python_callable=train, max_return_value_bytes=2000)
    # cluster mode: the driver program's flags
    args = op.job_settings().to_args()
    assert args[args.index("--max-return-value-bytes") + 1] == "2000"
    base = ["--payload", "p", "--result-dir", "d"]
    assert _settings(_parse([*base, *args])[1]).max_return_value_bytes == 2000
    assert _settings(_parse([*base, "--np", "2"])[1]).max_return_value_bytes == 64 * 2**20  # HorovodRunner's
    # Spark Connect and client mode: the operator's request carries the settings to the hook
    from airflow_provider_horovod.job import TrainingJob

    request = TrainingJob(key=b"k", payload=b"payload", artifact_dir="/art", settings=op.job_settings())
    assert request.settings.max_return_value_bytes == 2000
    assert BarrierRunner(request.settings).settings.max_return_value_bytes == 2000
    calls = {"settings": request.settings}
    from airflow_provider_horovod.hooks import horovod as hook_module

    class Submitted(Exception):
        pass

    class FakeSubmit:
        def __init__(self, **kwargs):
            self.application_args = kwargs["application_args"]

        def submit(self, **kwargs):
            raise Submitted(self.application_args)

    monkeypatch.setattr(hook_module, "_SparkSubmit", FakeSubmit)
    with pytest.raises(Submitted) as info:
        hook_module.HorovodHook(conn_id=None).run_job(
            TrainingJob(key=b"k" * 32, payload=b"", artifact_dir=str(tmp_path / "art"), settings=calls["settings"]),
            payload_path=str(tmp_path / "payload.bin"),
            staging_dir=str(tmp_path),
        )
    driver_args = info.value.args[0]
    assert _settings(_parse(driver_args)[1]).max_return_value_bytes == 2000
