"""The launchers' table (runtime/launchers.py) and the settings that pick one."""

from __future__ import annotations

import pytest

from airflow_provider_horovod.runtime import HorovodRunner
from airflow_provider_horovod.runtime.driver.program import _settings
from airflow_provider_horovod.runtime.launchers import LAUNCHERS, get_launcher, preimports
from airflow_provider_horovod.runtime.settings import LAUNCHER_NAMES, JobSettings
from airflow_provider_horovod.runtime.torch_distributor import TorchDistributor


def test_a_torch_rank_started_ahead_imports_torch_distributed_whatever_its_function_names():
    assert preimports(b"...import horovod.torch as hvd...", "torch") == ["torch.distributed"]
    assert preimports(b"plain", "torch") == ["torch.distributed"]
    assert preimports(b"...horovod.torch...horovod.keras...") == ["horovod.torch", "horovod.keras"]
    assert preimports(b"plain") == []


def test_the_settings_offer_exactly_the_launchers_table():
    assert LAUNCHER_NAMES == tuple(LAUNCHERS) == ("horovod", "torch")
    assert JobSettings(np=2).launcher == "horovod"
    with pytest.raises(ValueError, match=r"launcher must be one of \('horovod', 'torch'\), got 'mpi'"):
        get_launcher("mpi")


@pytest.mark.parametrize("value", ["mpi", "Torch", None, 1])
def test_a_bad_launcher_is_refused_by_the_runtime_entry_points_with_one_message(value):
    with pytest.raises(ValueError) as expected:
        JobSettings(np=2, launcher=value)
    assert str(expected.value) == f"launcher must be one of ('horovod', 'torch'), got {value!r}"
    with pytest.raises(ValueError) as runner:
        HorovodRunner(np=2, launcher=value)
    assert str(runner.value) == str(expected.value)


def test_the_launcher_reaches_the_driver_program_through_its_flags():
    settings = JobSettings(np=2, launcher="torch")
    assert "--launcher" in settings.to_args()
    assert _settings(settings.to_args()) == settings
    with pytest.raises(ValueError, match="launcher must be one of"):
        _settings(["--np", "2", "--launcher", "mpi"])


def test_the_horovod_timeline_needs_the_horovod_launcher():
    with pytest.raises(ValueError, match="timeline=True records the Horovod Timeline and needs launcher='horovod'"):
        JobSettings(np=2, timeline=True, launcher="torch")


@pytest.mark.parametrize(
    ("kwargs", "says"),
    [
        ({"num_processes": 0}, "num_processes must be a positive int"),
        ({"num_processes": True}, "num_processes must be a positive int"),
        ({"num_processes": "2"}, "num_processes must be a positive int"),
        ({"num_processes": 2, "np": 2}, "np is not a TorchDistributor argument"),
        ({"num_processes": 2, "timeline": True}, "timeline is not a TorchDistributor argument"),
        ({"num_processes": 2, "start_timeout_s": 0}, "start_timeout_s must be a positive number"),
    ],
)
def test_torch_distributor_refuses_bad_arguments_when_made(kwargs, says):
    with pytest.raises(ValueError, match=says):
        TorchDistributor(**kwargs)


def test_torch_distributor_refuses_what_it_cannot_run_before_any_spark_work(tmp_path):
    distributor = TorchDistributor(num_processes=2, local_mode=True, use_gpu=False)
    with pytest.raises(ValueError, match="train_object: no training script at .*missing.py"):
        distributor.run(str(tmp_path / "missing.py"))
    with pytest.raises(ValueError, match="train_object must be a function or the path of a training script, got int"):
        distributor.run(42)
    script = tmp_path / "train.py"
    script.write_text("pass\n")
    with pytest.raises(ValueError, match=r"command-line arguments only, got keyword arguments \['epochs'\]"):
        distributor.run(str(script), epochs=3)


def test_what_differs_between_the_launchers_is_their_attributes():
    horovod, torch = get_launcher("horovod"), get_launcher("torch")
    assert horovod.imports_devices_late and not torch.imports_devices_late  # horovod.torch looks at the GPUs on import
    assert torch.sets_omp_threads and not horovod.sets_omp_threads  # torchrun's OMP_NUM_THREADS=1; horovodrun: none
    assert horovod.timeline and not torch.timeline  # the Horovod Timeline
