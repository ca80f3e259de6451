"""HorovodRunner on a real local Spark with real Horovod (Gloo on the CPU)."""

from __future__ import annotations

import importlib.util
import os
import sys
import time

import cloudpickle
import psutil
import pytest

from airflow_provider_horovod.runtime import HorovodRunner, LaunchError, RankFailedError, ReturnValueTooLargeError
from tests.conftest import SESSION_MARK, session_processes

pytestmark = pytest.mark.spark


def allreduce_rank_and_size(value):
    import horovod.torch as hvd
    import torch

    hvd.init()
    total = hvd.allreduce(torch.tensor([float(hvd.rank() + 1)]), op=hvd.Sum)
    print(f"rank says hello, total={total.item()}", flush=True)
    return {
        "rank": hvd.rank(),
        "size": hvd.size(),
        "local_size": hvd.local_size(),
        "total": total.item(),
        "value": value,
    }


def fail_on_rank_one():
    import horovod.torch as hvd
    import torch

    hvd.init()
    print("starting epoch 1", flush=True)
    if hvd.rank() == 1:
        raise ValueError("corrupt shard on rank 1")
    # rank 0 waits in a collective that rank 1 never joins; it must be stopped, not time out
    hvd.allreduce(torch.tensor([1.0]))
    return "unreachable"


def save_model_then_return(nbytes):
    import os

    import horovod.torch as hvd

    from airflow_provider_horovod.runtime import artifact_dir

    hvd.init()
    if hvd.rank() == 0:
        with open(os.path.join(artifact_dir(), "model.pt"), "wb") as f:
            f.write(b"weights")
        return b"x" * nbytes
    return None


def _worker_processes() -> list[psutil.Process]:
    return session_processes(os.environ[SESSION_MARK], cmdline_contains="airflow_provider_horovod.runtime.rank.worker")


def test_np2_returns_rank0_value(spark):
    result = HorovodRunner(np=2).run(allreduce_rank_and_size, value="x")
    assert result == {"rank": 0, "size": 2, "local_size": 2, "total": 3.0, "value": "x"}


def test_negative_np_runs_on_the_driver(spark_env):
    result = HorovodRunner(np=-2).run(allreduce_rank_and_size, value=7)
    assert result == {"rank": 0, "size": 2, "local_size": 2, "total": 3.0, "value": 7}


def test_failing_rank_fails_fast_with_its_traceback(spark):
    started = time.monotonic()
    with pytest.raises(RankFailedError) as info:
        HorovodRunner(np=2).run(fail_on_rank_one)
    elapsed = time.monotonic() - started
    err = info.value
    assert err.rank == 1
    assert err.exit_code == 1
    assert err.exc_type == "ValueError"
    assert "corrupt shard on rank 1" in str(err)
    assert 'raise ValueError("corrupt shard on rank 1")' in err.traceback
    assert "starting epoch 1" in err.output_tail
    # Gloo's timeout is 300 s: finishing far below it proves the failure was not waited out.
    assert elapsed < 120, elapsed
    procs = _worker_processes()
    _gone, alive = psutil.wait_procs(procs, timeout=15)
    assert not alive, f"training processes left behind: {[p.pid for p in alive]}"


def test_failing_rank_on_the_driver(spark_env):
    with pytest.raises(RankFailedError) as info:
        HorovodRunner(np=-2).run(fail_on_rank_one)
    assert info.value.rank == 1 and info.value.exc_type == "ValueError"
    _gone, alive = psutil.wait_procs(_worker_processes(), timeout=15)
    assert not alive


def test_function_from_a_dag_file_module(spark, tmp_path):
    """A function defined in a file executors cannot import (like a DAG file) still runs."""
    src = tmp_path / "retrain_dag.py"
    src.write_text(
        "SCALE = 10\n"
        "def helper(x):\n    return x * SCALE\n"
        "def main(x):\n"
        "    import horovod.torch as hvd, torch\n"
        "    hvd.init()\n"
        "    s = hvd.allreduce(torch.tensor([float(helper(x))]), op=hvd.Sum)\n"
        "    return (hvd.rank(), s.item())\n"
    )
    spec = importlib.util.spec_from_file_location("unusual_prefix_deadbeef_retrain_dag", src)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    try:
        assert HorovodRunner(np=2).run(module.main, x=4) == (0, 80.0)
    finally:
        del sys.modules[spec.name]


def test_log_verbosity_controls_what_reaches_the_driver(spark, capfd):
    HorovodRunner(np=2).run(allreduce_rank_and_size, value=1)
    out = capfd.readouterr().out
    assert "[rank 0] rank says hello" in out and "[rank 1]" not in out
    HorovodRunner(np=2, driver_log_verbosity="all").run(allreduce_rank_and_size, value=1)
    out = capfd.readouterr().out
    assert "[rank 0] rank says hello" in out and "[rank 1] rank says hello" in out


def test_artifact_dir_reaches_every_rank(spark, tmp_path):
    def write(tag):
        import os

        import horovod.torch as hvd

        from airflow_provider_horovod.runtime import artifact_dir

        hvd.init()
        path = os.path.join(artifact_dir(), f"{tag}-rank{hvd.rank()}.txt")
        with open(path, "w") as f:
            f.write(str(hvd.rank()))
        return path

    target = tmp_path / "models" / "try-1"
    path = HorovodRunner(np=2, artifact_dir=str(target)).run(write, tag="m")
    assert path == str(target / "m-rank0.txt")
    assert sorted(p.name for p in target.iterdir()) == ["m-rank0.txt", "m-rank1.txt"]


def test_too_many_ranks_for_local_master_fails_before_submitting(spark):
    with pytest.raises(LaunchError, match=r"np=3 needs 3 task slots but the master local\[2\] has 2"):
        HorovodRunner(np=3).run(allreduce_rank_and_size, value=0)


@pytest.mark.parametrize("np_", [2, -2], ids=["barrier", "on-driver"])
def test_a_return_value_over_the_limit_is_refused_on_rank_0(request, tmp_path, np_):
    request.getfixturevalue("spark" if np_ > 0 else "spark_env")
    started = time.monotonic()
    with pytest.raises(ReturnValueTooLargeError) as info:
        HorovodRunner(np=np_, artifact_dir=str(tmp_path), max_return_value_bytes=1000).run(
            save_model_then_return, nbytes=50_000
        )
    assert time.monotonic() - started < 60
    size = len(cloudpickle.dumps(b"x" * 50_000))
    assert str(info.value).startswith(
        f"rank 0 returned {size} bytes once pickled (a bytes), above "
        "max_return_value_bytes=1000; it was not sent to the driver"
    )
    assert (info.value.size, info.value.limit) == (size, 1000)
    assert (tmp_path / "model.pt").read_bytes() == b"weights"  # the model stays


def test_a_120_mb_return_value_is_refused_at_once_by_default(spark, tmp_path, capfd):
    """Without a limit it went through the executor's and the driver's JVMs: out of memory, or a stall of minutes."""
    started = time.monotonic()
    with pytest.raises(ReturnValueTooLargeError, match=rf"above max_return_value_bytes={64 * 2**20}; it was not "):
        HorovodRunner(np=2, artifact_dir=str(tmp_path)).run(save_model_then_return, nbytes=120 * 10**6)
    assert time.monotonic() - started < 60
    assert (tmp_path / "model.pt").read_bytes() == b"weights"
    size = len(cloudpickle.dumps(b"x" * 120 * 10**6))
    assert (
        f"[rank 0] airflow-provider-horovod: rank 0's return value (a bytes) is {size} bytes pickled, above "
        f"max_return_value_bytes={64 * 2**20}: it is not sent to the driver"
    ) in capfd.readouterr().out
    assert HorovodRunner(np=2).run(allreduce_rank_and_size, value=1)["total"] == 3.0  # Spark is still fine


def test_a_bystanders_traceback_in_the_log_is_labelled_a_consequence(spark_env, capfd):
    """Rank 0 is stopped by Horovod's shutdown after rank 1 fails: its traceback is not the log's last word."""
    with pytest.raises(RankFailedError) as info:
        HorovodRunner(np=-2).run(fail_on_rank_one)
    assert info.value.rank == 1
    out = capfd.readouterr().out
    assert "[rank 0] ^ rank 0 stopped because another rank failed first" in out, out[-3000:]
    assert out.index("[rank 0] ^ rank 0 stopped") > out.rindex("[rank 0] Traceback")  # after its traceback


def train_and_checkpoint(fail_at_step, steps=6):
    """Add the world size to ``w`` each step, checkpoint every 2 steps; rank 1 fails at ``fail_at_step``."""
    import horovod.torch as hvd
    import torch

    from airflow_provider_horovod.runtime import load_checkpoint, save_checkpoint, try_number

    hvd.init()
    w, start = torch.zeros(2), 0
    resumed = load_checkpoint()
    if resumed is not None:
        state, start = resumed
        w = state["w"]
    for step in range(start + 1, steps + 1):
        w = w + hvd.allreduce(torch.ones(2), op=hvd.Sum)
        if step % 2 == 0:
            save_checkpoint({"w": w}, step=step)
        if step == fail_at_step and hvd.rank() == 1:
            raise RuntimeError(f"rank 1 lost at step {step}")
    first_steps = hvd.allgather_object(start + 1)  # the function's own record of where each rank began
    return {"first_steps": first_steps, "w": w.tolist(), "try_number": try_number()}


def test_a_second_job_resumes_from_the_first_one_s_latest_checkpoint(spark, tmp_path, capfd):
    # ~15 s: two np=2 jobs on the shared local[2] session
    where = str(tmp_path / "checkpoints")
    with pytest.raises(RankFailedError, match="rank 1 lost at step 5"):
        HorovodRunner(np=2, checkpoint_dir=where, try_number=1).run(train_and_checkpoint, fail_at_step=5)
    assert sorted(f for f in os.listdir(where) if f.endswith(".json")) == [
        "step-000000000002.json",
        "step-000000000004.json",
    ]
    capfd.readouterr()
    result = HorovodRunner(np=2, checkpoint_dir=where, try_number=2).run(train_and_checkpoint, fail_at_step=None)
    assert result == {"first_steps": [5, 5], "w": [12.0, 12.0], "try_number": 2}
    out = capfd.readouterr().out
    assert "[rank 0] airflow-provider-horovod: resuming from checkpoint step 4 (try 2), saved by try 1" in out


def _connect_and_wait(address, token, rows):
    import time

    from airflow_provider_horovod.runtime.wire.logs import LogClient

    client = LogClient(address, token)
    client.send("started")  # what a barrier task's first heartbeat does
    time.sleep(4)  # the task runs on: the driver must stop asking for offer rounds meanwhile
    client.close()
    yield 1


def test_offers_are_renewed_only_until_a_task_of_the_stage_has_started(spark):
    """The driver asks Spark for fresh offer rounds while its barrier stage waits to be launched, and stops as soon as
    a task of it has connected to the job's log channel (not for the whole job)."""
    import functools

    from airflow_provider_horovod.runtime.driver.slots import offers_renewed
    from airflow_provider_horovod.runtime.wire.logs import LogServer

    with LogServer("127.0.0.1", on_line=lambda line: None) as logs:
        task = functools.partial(_connect_and_wait, logs.address, logs.token)
        with offers_renewed(spark.sparkContext, lambda: logs.accepted > 0, poll_s=0.1) as rounds:
            assert spark.sparkContext.parallelize(range(2), 2).barrier().mapPartitions(task).collect() == [1, 1]
    assert logs.accepted == 2
    assert rounds.launched
    assert rounds.asked < 30  # the tasks ran 4 s after connecting: asking all along would be 40 rounds


def test_renewing_offers_ends_with_the_body_when_no_stage_comes(spark):
    from airflow_provider_horovod.runtime.driver.slots import offers_renewed

    with offers_renewed(spark.sparkContext, lambda: False, poll_s=0.05) as rounds:
        deadline = time.monotonic() + 10  # the body: no stage is ever submitted
        while rounds.asked < 3 and time.monotonic() < deadline:
            time.sleep(0.01)  # polls the count, bounded
        ended = time.monotonic()
    assert rounds.asked >= 3  # it keeps asking while no task has started ...
    assert time.monotonic() - ended < 1  # ... and ends with the body
    assert not rounds.launched
