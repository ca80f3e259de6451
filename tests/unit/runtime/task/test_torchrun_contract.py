"""
A torch rank's environment against what ``torchrun`` gives its workers on this machine (a real torchrun, 2 workers):
every variable torchrun sets is set, torchrun's per-rank error file is read back when a rank fails, and CPU-only ranks
are told so (``ACCELERATE_USE_CPU``), the job's ``env_vars`` and the executor's environment winning over defaults.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from airflow_provider_horovod.runtime.settings import JobSettings
from airflow_provider_horovod.runtime.task.backends import RendezvousPoint, backend_for
from airflow_provider_horovod.runtime.task.plan import local_plan
from airflow_provider_horovod.runtime.task.rank_env import RankPipes, omp_threads, worker_environ
from airflow_provider_horovod.runtime.task.rank_failure import exit_failure
from airflow_provider_horovod.runtime.wire import protocol
from airflow_provider_horovod.runtime.wire.jobspec import JobSpec

DUMP = textwrap.dedent(
    """
    import json, os, sys
    with open(os.path.join(sys.argv[1], "env-" + os.environ["RANK"] + ".json"), "w") as f:
        json.dump(dict(os.environ), f)
    """
)


def spec(launcher: str = "torch", env: dict[str, str] | None = None, use_gpu: bool = False) -> JobSpec:
    return JobSpec(payload=b"", settings=JobSettings(np=2, launcher=launcher, use_gpu=use_gpu), env=env or {})


def our_rank_env(job: JobSpec, rank: int, rank_dir: str) -> dict[str, str]:
    plan = local_plan(2)
    point = RendezvousPoint(addr="127.0.0.1", iface="lo", gloo_timeout_s=60, port=29500, run_id="r")
    launch_env = backend_for(job.launcher.name).rank_env(plan[rank], plan, point)
    pipes = RankPipes(lifeline=3, progress=4)
    threads = omp_threads(job, {})
    return {**worker_environ(job, launch_env=launch_env, devices={}, rank_dir=rank_dir, pipes=pipes, threads=threads)}


def test_a_torch_rank_gets_every_variable_torchrun_gives_its_workers(tmp_path):
    script = tmp_path / "dump.py"
    script.write_text(DUMP)
    parent = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "LANG": "C.UTF-8"}
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes=1", "--nproc_per_node=2"]
    subprocess.run([*torchrun, str(script), str(tmp_path)], env=parent, check=True, timeout=120, capture_output=True)
    workers = [json.loads((tmp_path / f"env-{rank}.json").read_text()) for rank in (0, 1)]
    torchrun_sets = set(workers[1]) - set(parent)
    assert {"RANK", "TORCHELASTIC_ERROR_FILE", "TORCH_NCCL_ASYNC_ERROR_HANDLING"} <= torchrun_sets  # the probe works

    ours = [our_rank_env(spec(), rank, str(tmp_path / f"rank-{rank}")) for rank in (0, 1)]
    assert torchrun_sets - set(ours[1]) == set()
    same_value = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE", "ROLE_NAME")
    same_value += ("ROLE_RANK", "ROLE_WORLD_SIZE", "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS")
    same_value += ("TORCH_NCCL_ASYNC_ERROR_HANDLING", "TORCHELASTIC_SIGNALS_TO_HANDLE", "OMP_NUM_THREADS")
    for theirs, mine in zip(workers, ours, strict=True):
        assert {k: mine[k] for k in same_value} == {k: theirs[k] for k in same_value}
    # each rank its own error file (torchrun: attempt_N/<local_rank>/error.json), in the rank's own directory
    assert ours[0]["TORCHELASTIC_ERROR_FILE"] == str(tmp_path / "rank-0" / protocol.RANK_FRAMEWORK_ERROR_FILE)
    assert ours[1]["TORCHELASTIC_ERROR_FILE"] != ours[0]["TORCHELASTIC_ERROR_FILE"]
    # the one deliberate difference: no agent serves the store here, rank 0's init_process_group does
    assert (workers[1]["TORCHELASTIC_USE_AGENT_STORE"], ours[1]["TORCHELASTIC_USE_AGENT_STORE"]) == ("True", "False")


def test_cpu_only_ranks_are_told_so_unless_the_job_or_the_executor_says_otherwise(monkeypatch, tmp_path):
    monkeypatch.delenv("ACCELERATE_USE_CPU", raising=False)
    monkeypatch.delenv("TORCH_NCCL_ASYNC_ERROR_HANDLING", raising=False)
    assert our_rank_env(spec(), 0, str(tmp_path))["ACCELERATE_USE_CPU"] == "true"
    assert our_rank_env(spec(env={"ACCELERATE_USE_CPU": "false"}), 0, str(tmp_path))["ACCELERATE_USE_CPU"] == "false"
    assert "ACCELERATE_USE_CPU" not in our_rank_env(spec(use_gpu=True), 0, str(tmp_path))
    horovod = our_rank_env(spec("horovod"), 0, str(tmp_path))
    assert not {"ACCELERATE_USE_CPU", "TORCHELASTIC_ERROR_FILE", "TORCH_NCCL_ASYNC_ERROR_HANDLING"} & set(horovod)
    # a value the executor's environment has is what the rank inherits: no default over it
    monkeypatch.setenv("TORCH_NCCL_ASYNC_ERROR_HANDLING", "3")
    monkeypatch.setenv("ACCELERATE_USE_CPU", "false")
    env = our_rank_env(spec(), 0, str(tmp_path))
    assert "TORCH_NCCL_ASYNC_ERROR_HANDLING" not in env and "ACCELERATE_USE_CPU" not in env


@pytest.mark.parametrize("own_error_too", [False, True])
def test_a_failure_is_read_from_torchelastic_s_error_file_where_the_rank_left_none(tmp_path, own_error_too):
    framework_file = tmp_path / protocol.RANK_FRAMEWORK_ERROR_FILE
    script = textwrap.dedent(
        """
        import os
        from torch.distributed.elastic.multiprocessing.errors import record

        @record
        def main():
            raise KeyError("missing column label")

        try:
            main()
        except KeyError:
            os._exit(3)
        """
    )
    env = {**os.environ, "TORCHELASTIC_ERROR_FILE": str(framework_file)}
    (tmp_path / "train.py").write_text(script)
    proc = subprocess.run([sys.executable, str(tmp_path / "train.py")], env=env, timeout=120, capture_output=True)
    assert proc.returncode == 3 and framework_file.exists()  # torch's own ErrorHandler wrote it
    own = tmp_path / protocol.RANK_ERROR_FILE
    if own_error_too:
        own.write_text(json.dumps({"exc_type": "RuntimeError", "exc_message": "ours", "traceback": "tb"}))
    err = exit_failure(
        rank=1,
        exit_code=3,
        error_path=str(own),
        host="127.0.0.1",
        output_tail=[],
        exited_at=None,
        launcher_name="torch",
        framework_error_path=str(framework_file),
    )
    if own_error_too:  # the rank's own record is the more precise one
        assert (err.exc_type, err.exc_message) == ("RuntimeError", "ours")
        return
    assert (err.exc_type, err.exc_message) == ("KeyError", "'missing column label'")
    assert 'raise KeyError("missing column label")' in err.traceback and err.failed_at is not None
    assert str(err).startswith("torch.distributed rank 1 on 127.0.0.1 failed (exit code 3): KeyError:")
