"""
torch.distributed (DDP) through the provider's launcher on a real local Spark: ``TorchDistributor`` (PySpark's API)
and ``HorovodRunner(launcher="torch")``; Gloo on the CPU, no Horovod used by the ranks.
"""

from __future__ import annotations

import os
import time

import psutil
import pytest

from airflow_provider_horovod.runtime import HorovodRunner, LaunchError, RankFailedError, TorchDistributor
from airflow_provider_horovod.runtime.task.gpus import driver_gpu_count
from tests.conftest import SESSION_MARK, session_processes

pytestmark = pytest.mark.spark

TORCHRUN_NAMES = (
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "NODE_RANK",
    "MASTER_ADDR",
    "GLOO_SOCKET_IFNAME",
    "CUDA_VISIBLE_DEVICES",
    "OMP_NUM_THREADS",
    "TORCHELASTIC_ERROR_FILE",
    "TORCHELASTIC_USE_AGENT_STORE",
    "ACCELERATE_USE_CPU",
)


def ddp_allreduce(scale, *, offset=0.0):
    import os

    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")  # env:// from the launcher's torchrun variables
    total = torch.tensor([float(dist.get_rank() + 1)])
    dist.all_reduce(total)
    env = {name: os.environ.get(name) for name in TORCHRUN_NAMES}
    envs = [None] * dist.get_world_size()
    dist.all_gather_object(envs, env)
    rank = dist.get_rank()
    dist.destroy_process_group()
    return {"rank": rank, "total": total.item() * scale + offset, "envs": envs, "port": os.environ["MASTER_PORT"]}


def ddp_train_step():
    """One DDP step of a tiny model: the gradients are averaged, so every rank ends with the same weights."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.full((8, 4), float(dist.get_rank() + 1))  # each rank its own data
    loss = model(x).pow(2).mean()
    loss.backward()
    opt.step()
    weights = [None] * dist.get_world_size()
    dist.all_gather_object(weights, model.module.weight.detach().tolist())
    dist.destroy_process_group()
    return weights


def fail_on_rank_one():
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    print("starting epoch 1", flush=True)
    if dist.get_rank() == 1:
        raise ValueError("corrupt shard on rank 1")
    dist.all_reduce(torch.ones(1))  # rank 0 waits in a collective rank 1 never joins: it must be stopped
    return "unreachable"


def _ranks_left() -> list[psutil.Process]:
    return session_processes(os.environ[SESSION_MARK], cmdline_contains="airflow_provider_horovod.runtime.rank.worker")


def _assert_torchrun_env(result, np_):
    assert [e["RANK"] for e in result["envs"]] == [str(r) for r in range(np_)]
    for env in result["envs"]:
        assert (env["WORLD_SIZE"], env["LOCAL_WORLD_SIZE"], env["GROUP_RANK"], env["NODE_RANK"]) == (
            str(np_),
            str(np_),
            "0",
            "0",
        )
        assert env["MASTER_ADDR"] == "127.0.0.1" and env["GLOO_SOCKET_IFNAME"] == "lo"
        assert env["CUDA_VISIBLE_DEVICES"] == ""  # use_gpu=False hides GPUs, as PySpark's TorchDistributor does
        # rank 0's init_process_group serves the store; CPU-only ranks are told so (Accelerate, Transformers)
        assert (env["TORCHELASTIC_USE_AGENT_STORE"], env["ACCELERATE_USE_CPU"]) == ("False", "true")
    assert [e["LOCAL_RANK"] for e in result["envs"]] == [str(r) for r in range(np_)]
    error_files = [e["TORCHELASTIC_ERROR_FILE"] for e in result["envs"]]  # one per rank, as under torchrun
    assert len(set(error_files)) == np_ and all(os.path.isabs(f) for f in error_files)


def test_ddp_on_a_barrier_stage_returns_rank0s_value_with_the_torchrun_environment(spark):
    result = TorchDistributor(num_processes=2, local_mode=False, use_gpu=False).run(ddp_allreduce, 10, offset=1.0)
    assert result["rank"] == 0 and result["total"] == 31.0
    _assert_torchrun_env(result, 2)
    assert int(result["port"]) > 0
    assert [e["OMP_NUM_THREADS"] for e in result["envs"]] == ["1", "1"]  # spark.task.cpus
    # the Spark UI names the job by its launcher (not "HorovodRunner"): the job's description in the status store
    jobs = spark.sparkContext._jsc.sc().statusStore().jobsList(None)
    descriptions = {jobs.apply(i).description().getOrElse(None) for i in range(jobs.size())}
    assert "torch.distributed np=2" in descriptions, descriptions


def test_ddp_on_the_driver(spark_env):
    result = TorchDistributor(num_processes=3, local_mode=True, use_gpu=False).run(ddp_allreduce, 1)
    assert result["total"] == 6.0
    _assert_torchrun_env(result, 3)
    # torchrun's rule for several processes on one machine: 1 each, unless the driver's environment sets it
    assert {e["OMP_NUM_THREADS"] for e in result["envs"]} == {os.environ.get("OMP_NUM_THREADS", "1")}


def test_ddp_gradients_are_averaged_across_the_ranks(spark):
    weights = HorovodRunner(np=2, launcher="torch").run(ddp_train_step)
    assert len(weights) == 2 and weights[0] == weights[1]


def test_a_torchrun_script_runs_unchanged_with_its_arguments(spark, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    script = tmp_path / "train.py"
    script.write_text(
        "import argparse, os\n"
        "import torch, torch.distributed as dist\n"
        "p = argparse.ArgumentParser()\n"
        "p.add_argument('--epochs', type=int)\n"
        "p.add_argument('--out')\n"
        "a = p.parse_args()\n"
        "dist.init_process_group('gloo')\n"
        "t = torch.tensor([float(a.epochs)])\n"
        "dist.all_reduce(t)\n"
        "with open(os.path.join(a.out, f\"rank{os.environ['RANK']}.txt\"), 'w') as f:\n"
        "    f.write(f\"{t.item()} {os.environ['LOCAL_RANK']} {__name__}\")\n"
        "dist.destroy_process_group()\n"
    )
    assert (
        TorchDistributor(num_processes=2, local_mode=False, use_gpu=False).run(
            str(script), "--epochs", 3, "--out", str(out)
        )
        is None
    )
    assert sorted(p.name for p in out.iterdir()) == ["rank0.txt", "rank1.txt"]
    assert (out / "rank1.txt").read_text() == "6.0 1 __main__"


def test_a_failing_rank_fails_the_job_fast_naming_it_and_stops_its_peer(spark):
    started = time.monotonic()
    with pytest.raises(RankFailedError) as info:
        TorchDistributor(num_processes=2, local_mode=False, use_gpu=False).run(fail_on_rank_one)
    elapsed = time.monotonic() - started
    err = info.value
    assert (err.rank, err.exit_code, err.exc_type, err.launcher) == (1, 1, "ValueError", "torch")
    assert str(err).startswith(
        "torch.distributed rank 1 on 127.0.0.1 failed (exit code 1): ValueError: corrupt shard on rank 1"
    )
    assert 'raise ValueError("corrupt shard on rank 1")' in err.traceback
    assert "starting epoch 1" in err.output_tail
    # Gloo's default collective timeout is 30 minutes: far below it proves rank 0 was stopped, not waited out
    assert elapsed < 60, elapsed
    _gone, alive = psutil.wait_procs(_ranks_left(), timeout=15)
    assert not alive, f"training processes left behind: {[p.pid for p in alive]}"


def test_a_failing_rank_on_the_driver_stops_the_others(spark_env):
    with pytest.raises(RankFailedError) as info:
        TorchDistributor(num_processes=2, local_mode=True, use_gpu=False).run(fail_on_rank_one)
    assert (info.value.rank, info.value.exc_type) == (1, "ValueError")
    _gone, alive = psutil.wait_procs(_ranks_left(), timeout=15)
    assert not alive


def test_an_exception_recorded_by_torchelastic_is_the_failing_rank_s_error(spark_env):
    """
    A script whose ``@record`` (torch.distributed.elastic) writes the exception to ``TORCHELASTIC_ERROR_FILE`` and then
    exits without raising it further: the job's error is that exception and call stack, as torchrun reports it.
    """

    def recorded_then_exit():
        import os

        from torch.distributed.elastic.multiprocessing.errors import record

        @record
        def main():
            if os.environ["RANK"] == "1":
                raise ValueError("checkpoint shard 7 is truncated")

        try:
            main()
        except ValueError:
            os._exit(3)  # past our own error file: only torchelastic's has the exception

    with pytest.raises(RankFailedError) as info:
        TorchDistributor(num_processes=2, local_mode=True, use_gpu=False).run(recorded_then_exit)
    err = info.value
    assert (err.rank, err.exit_code, err.exc_type, err.exc_message) == (
        1,
        3,
        "ValueError",
        "checkpoint shard 7 is truncated",
    )
    assert 'raise ValueError("checkpoint shard 7 is truncated")' in err.traceback


def test_a_rank_that_never_joins_is_reported_at_start_timeout_s(spark_env):
    def rank_one_never_joins():
        import os
        import time

        import torch.distributed as dist

        if os.environ["RANK"] == "1":
            time.sleep(120)
        dist.init_process_group("gloo")

    started = time.monotonic()
    with pytest.raises(RankFailedError) as info:
        TorchDistributor(num_processes=2, local_mode=True, use_gpu=False, start_timeout_s=5, training_timeout_s=60).run(
            rank_one_never_joins
        )
    assert "init_process_group()" in str(info.value)
    assert time.monotonic() - started < 45


def test_use_gpu_on_a_driver_without_gpus_is_refused_before_any_rank_starts(spark_env, tmp_path):
    marker = tmp_path / "ran"

    def touch():
        marker.touch()
        return "ran"

    if driver_gpu_count():
        pytest.skip("this machine has GPUs")
    with pytest.raises(LaunchError, match=r"use_gpu=True but the driver has no GPUs .* for 2 ranks on the driver"):
        TorchDistributor(num_processes=2, local_mode=True, use_gpu=True).run(touch)
    assert not marker.exists()
