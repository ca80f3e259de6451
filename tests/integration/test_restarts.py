"""
In-job restarts (``max_restarts``, ``restart_on``) on a real local Spark: a rank SIGKILLed mid-training restarts the
barrier job on the same application and the ranks resume from the checkpoint (Horovod, np=2 barrier tasks); a
torch.distributed job's ranks see torchrun's restart variables (2 ranks on the driver); the training code's own
exception fails at once unless ``restart_on`` names it; a job that keeps failing stops at ``max_restarts``, naming
every restart. Restarts on a lost executor of a standalone cluster: tests/e2e/test_durable.py.
"""

from __future__ import annotations

import json
import time

import psutil
import pytest

from airflow_provider_horovod.runtime import HorovodRunner, RankFailedError, RankKilledError, TorchDistributor

pytestmark = pytest.mark.spark


def train_killed_once(steps: int, every: int, kill_at: int, out: str):
    """``steps`` steps with a checkpoint every ``every``; on the first attempt rank 1 starts a child process (as a
    DataLoader worker would) and is SIGKILLed after step ``kill_at``."""
    import os
    import signal
    import subprocess
    import sys

    import horovod.torch as hvd
    import torch

    from airflow_provider_horovod.runtime import load_checkpoint, report, restart_count, save_checkpoint

    hvd.init()
    resumed = load_checkpoint()
    start = 0 if resumed is None else resumed[1]
    for step in range(start + 1, steps + 1):
        hvd.allreduce(torch.ones(1), name=f"step{step}")
        report(step=step, total_steps=steps, loss=1.0 / step)
        if step % every == 0:
            save_checkpoint({"step": step}, step=step)
        if restart_count() == 0 and hvd.rank() == 1 and step == kill_at:
            child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
            with open(os.path.join(out, "child.pid"), "w") as f:
                f.write(str(child.pid))
            os.kill(os.getpid(), signal.SIGKILL)
    with open(f"/proc/{os.getppid()}/cmdline", "rb") as f:  # a restarted rank: forked by the job's fork server
        forked_by = os.getppid() if b"runtime.rank.fork_server" in f.read() else None
    return {"restart_count": restart_count(), "resumed_at": start, "last_step": steps, "forked_by": forked_by}


def test_a_killed_rank_restarts_the_job_which_resumes_from_the_checkpoint(spark, tmp_path, capfd):
    artifacts, checkpoints = tmp_path / "artifacts", tmp_path / "checkpoints"
    runner = HorovodRunner(
        np=2, max_restarts=2, artifact_dir=str(artifacts), checkpoint_dir=str(checkpoints), start_timeout_s=120
    )
    value = runner.run(train_killed_once, steps=20, every=5, kill_at=12, out=str(tmp_path))
    server = value.pop("forked_by")
    assert value == {"restart_count": 1, "resumed_at": 10, "last_step": 20}  # 2 steps trained again (< 5)
    # the restarted rank was forked by the fork server the first attempt's task started (horovod.torch imported
    # there), which went once the job succeeded
    assert server is not None
    psutil.wait_procs([psutil.Process(server)] if psutil.pid_exists(server) else [], timeout=30)
    assert not psutil.pid_exists(server) or psutil.Process(server).status() == psutil.STATUS_ZOMBIE
    assert [(r.number, r.cause) for r in runner.restarts] == [(1, "rank 1 killed by SIGKILL")]
    out = capfd.readouterr().out
    forked = "[rank 0] airflow-provider-horovod: forked from the job's fork server on this host (horovod.torch "
    assert out.count(forked) == 1, out  # the restarted attempt's rank 0, not the first attempt's
    # rank 0 reported step 12 last before its collective failed: the step the first attempt reached
    assert "airflow-provider-horovod: restart 1/2: rank 1 killed by SIGKILL at step 12; starting again now" in out
    assert runner.restarts[0].step == 12
    snapshot = json.loads((artifacts / "progress.json").read_text())
    assert snapshot["state"] == "finished" and snapshot["step"] == 20
    assert [r["cause"] for r in snapshot["restarts"]] == ["rank 1 killed by SIGKILL"]
    assert snapshot["resumed"]["step"] == 10
    # the killed rank's child went with it (its launcher kills the rank's whole process group)
    child = int((tmp_path / "child.pid").read_text())
    deadline = time.monotonic() + 10
    while psutil.pid_exists(child) and psutil.Process(child).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, f"the killed rank's child {child} outlived it"
        time.sleep(0.1)


def test_the_job_s_environment_turns_the_fork_server_off(spark, tmp_path, capfd):
    runner = HorovodRunner(
        np=2,
        max_restarts=1,
        checkpoint_dir=str(tmp_path / "checkpoints"),
        start_timeout_s=120,
        env={"HOROVOD_AIRFLOW_FORK_SERVER": "off"},
    )
    value = runner.run(train_killed_once, steps=10, every=5, kill_at=7, out=str(tmp_path))
    assert value["restart_count"] == 1 and value["forked_by"] is None  # the restarted ranks were started
    assert "forked from the job's fork server" not in capfd.readouterr().out


def torch_env_per_attempt(out: str):
    """Record each attempt's torchrun restart variables; rank 1 is SIGKILLed on the first attempt."""
    import os
    import signal

    import torch.distributed as dist

    from airflow_provider_horovod.runtime import restart_count

    dist.init_process_group("gloo")
    names = ("TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID")
    seen = {name: os.environ.get(name) for name in names}
    seen["restart_count"] = restart_count()
    if dist.get_rank() == 0:
        with open(os.path.join(out, f"attempt-{restart_count()}.json"), "w") as f:
            json.dump(seen, f)
    dist.barrier()
    if restart_count() == 0 and dist.get_rank() == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    dist.barrier()
    return seen


def test_a_torch_job_s_ranks_see_torchrun_s_restart_variables(spark_env, tmp_path):
    distributor = TorchDistributor(num_processes=2, local_mode=True, use_gpu=False, max_restarts=3)
    value = distributor.run(torch_env_per_attempt, str(tmp_path))
    first = json.loads((tmp_path / "attempt-0.json").read_text())
    assert (first["TORCHELASTIC_RESTART_COUNT"], first["TORCHELASTIC_MAX_RESTARTS"], first["restart_count"]) == (
        "0",
        "3",
        0,
    )
    assert (value["TORCHELASTIC_RESTART_COUNT"], value["TORCHELASTIC_MAX_RESTARTS"], value["restart_count"]) == (
        "1",
        "3",
        1,
    )
    assert value["TORCHELASTIC_RUN_ID"] and value["TORCHELASTIC_RUN_ID"] != first["TORCHELASTIC_RUN_ID"]  # a new run
    assert [r.cause for r in distributor.restarts] == ["rank 1 killed by SIGKILL"]


def raise_on_first_attempt():
    import horovod.torch as hvd

    from airflow_provider_horovod.runtime import restart_count

    hvd.init()
    if restart_count() == 0 and hvd.rank() == 1:
        raise ValueError("corrupt shard")
    return restart_count()


def torch_killed_once(out: str):
    import os
    import signal

    import torch
    import torch.distributed as dist

    from airflow_provider_horovod.runtime import restart_count

    dist.init_process_group("gloo")
    dist.all_reduce(torch.ones(1))
    if restart_count() == 0 and dist.get_rank() == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    dist.all_reduce(torch.ones(1))
    return {
        "restart_count": restart_count(),
        "world": dist.get_world_size(),
        "torchelastic": os.environ["TORCHELASTIC_RESTART_COUNT"],
    }


def test_a_torch_job_on_barrier_tasks_restarts_after_a_killed_rank(spark, tmp_path):
    distributor = TorchDistributor(num_processes=2, local_mode=False, use_gpu=False, max_restarts=1)
    value = distributor.run(torch_killed_once, str(tmp_path))
    assert value == {"restart_count": 1, "world": 2, "torchelastic": "1"}
    assert [r.cause for r in distributor.restarts] == ["rank 1 killed by SIGKILL"]


def test_the_training_code_s_exception_fails_at_once_unless_restart_on_names_it(spark_env):
    runner = HorovodRunner(np=-2, max_restarts=2)
    started = time.monotonic()
    with pytest.raises(RankFailedError, match="ValueError: corrupt shard") as info:
        runner.run(raise_on_first_attempt)
    assert runner.restarts == [] and info.value.restarts == [] and time.monotonic() - started < 60
    assert not getattr(info.value, "__notes__", None)

    opted_in = HorovodRunner(np=-2, max_restarts=2, restart_on=[ValueError])
    assert opted_in.run(raise_on_first_attempt) == 1
    assert [r.cause for r in opted_in.restarts] == ["rank 1 raised ValueError: corrupt shard"]


def killed_every_time():
    import os
    import signal

    import horovod.torch as hvd

    hvd.init()
    if hvd.rank() == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    hvd.allreduce(__import__("torch").ones(1), name="never")


def test_more_faults_than_max_restarts_fail_the_job_naming_every_restart(spark_env):
    runner = HorovodRunner(np=-2, max_restarts=1)
    with pytest.raises(RankKilledError) as info:
        runner.run(killed_every_time)
    err = info.value
    assert err.rank == 1 and [r["number"] for r in err.restarts] == [1]
    assert "the job was restarted 1 time(s) of max_restarts=1 before this failure:" in "\n".join(err.__notes__)
    assert "restart 1: rank 1 killed by SIGKILL" in "\n".join(err.__notes__)


def test_the_driver_program_tells_the_airflow_side_every_restart(spark_env, tmp_path, monkeypatch):
    """What client and cluster deploy mode read back (``result.json``): the failure's message names the restarts, and
    the Airflow side raises the rank failure's kind with it."""
    from airflow_provider_horovod.exceptions import HorovodRankKilledError
    from airflow_provider_horovod.runtime.driver import program as driver
    from airflow_provider_horovod.runtime.wire.payload import dumps_payload
    from airflow_provider_horovod.utils.job_result import rank_job_error

    monkeypatch.delenv(driver.KEY_ENV, raising=False)
    (tmp_path / "payload.bin").write_bytes(dumps_payload(killed_every_time))
    args = ["--payload", str(tmp_path / "payload.bin"), "--result-dir", str(tmp_path), "--np", "-2"]
    assert driver.main([*args, "--max-restarts", "1"]) == 1
    outcome = json.loads((tmp_path / "result.json").read_text())
    assert [r["cause"] for r in outcome["restarts"]] == ["rank 1 killed by SIGKILL"]
    error = rank_job_error(outcome["message"], outcome["error"])
    assert isinstance(error, HorovodRankKilledError)
    assert "the job was restarted 1 time(s) of max_restarts=1 before this failure:" in str(error)
