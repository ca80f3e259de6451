"""The thread policy of ``torch.distributed`` ranks on the driver (``OMP_NUM_THREADS``, torchrun's rule)."""

from __future__ import annotations

import os

from airflow_provider_horovod.runtime.settings import JobSettings
from airflow_provider_horovod.runtime.task.rank_env import RankPipes, omp_threads, worker_environ
from airflow_provider_horovod.runtime.wire import protocol
from airflow_provider_horovod.runtime.wire.jobspec import JobSpec


def spec(np_: int = 2, launcher: str = "torch", env: dict[str, str] | None = None) -> JobSpec:
    return JobSpec(payload=b"", settings=JobSettings(np=np_, launcher=launcher), env=env or {})


def test_several_processes_on_the_driver_get_one_thread_each_as_under_torchrun():
    assert omp_threads(spec(3), {}) == 1
    assert omp_threads(spec(1), {}) is None  # one process: torch's own default, as torchrun leaves it


def test_a_setting_of_the_driver_or_the_job_and_horovod_ranks_are_left_alone():
    assert omp_threads(spec(3), {"OMP_NUM_THREADS": "2"}) is None
    assert omp_threads(spec(3, env={"OMP_NUM_THREADS": "3"}), {}) is None
    assert omp_threads(spec(3, launcher="horovod"), {}) is None


def test_the_threads_go_under_the_jobs_env():
    common = dict(launch_env={}, devices={}, rank_dir="d", pipes=RankPipes(lifeline=3, progress=4))
    assert worker_environ(spec(), threads=1, **common)["OMP_NUM_THREADS"] == "1"
    assert worker_environ(spec(env={"OMP_NUM_THREADS": "5"}), threads=1, **common)["OMP_NUM_THREADS"] == "5"
    assert "OMP_NUM_THREADS" not in worker_environ(spec(), threads=None, **common)


def test_the_rank_s_files_are_named_in_its_own_directory():
    env = worker_environ(spec(), launch_env={}, devices={}, rank_dir="d", pipes=RankPipes(lifeline=3, progress=4))
    assert (env[protocol.ENV_PAYLOAD], env[protocol.ENV_RESULT], env[protocol.ENV_ERROR]) == (
        os.path.join("d", protocol.RANK_PAYLOAD_FILE),
        os.path.join("d", protocol.RANK_VALUE_FILE),
        os.path.join("d", protocol.RANK_ERROR_FILE),
    )
    assert (env[protocol.ENV_LIFELINE], env[protocol.ENV_PROGRESS]) == ("3", "4")
    assert protocol.ENV_METRICS not in env and protocol.ENV_RELEASE not in env
