"""Fault injection on real Spark + Horovod: what the user sees, and that nothing keeps running."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from airflow_provider_horovod.runtime import (
    HorovodRunner,
    JobCancelledError,
    LaunchError,
    RankFailedError,
    RankKilledError,
    RendezvousError,
)

pytestmark = [pytest.mark.faults, pytest.mark.spark]


def die_hard(how):
    import os
    import signal

    import horovod.torch as hvd
    import torch

    hvd.init()
    print("epoch 1 done", flush=True)
    if hvd.rank() == 1:
        if how == "sigkill":
            os.kill(os.getpid(), signal.SIGKILL)
        os._exit(3)
    hvd.allreduce(torch.ones(1))


@pytest.mark.parametrize(("how", "reason"), [("sigkill", "killed by signal SIGKILL"), ("exit", "exit code 3")])
def test_rank_dying_hard_is_named_with_its_exit_status(spark, no_rank_left_behind, how, reason):
    started = time.monotonic()
    with pytest.raises(RankFailedError) as info:
        HorovodRunner(np=2).run(die_hard, how=how)
    assert info.value.rank == 1
    assert reason in str(info.value)
    # a signal is its own kind of failure (RankKilledError, a RankFailedError); an exit status is not
    assert isinstance(info.value, RankKilledError) is (how == "sigkill"), type(info.value)
    assert "epoch 1 done" in info.value.output_tail
    assert time.monotonic() - started < 90


def _hang_if_rank_one():
    import os
    import time

    if os.environ.get("HOROVOD_RANK") == "1":
        time.sleep(3600)
    return "loaded"


class SlowToLoadOnRankOne:
    """Unpickling it hangs on rank 1: that rank never gets to hvd.init() (like a hanging import)."""

    def __reduce__(self):
        return (_hang_if_rank_one, ())


def init_and_return(obj):
    import horovod.torch as hvd

    hvd.init()
    return obj


def test_rank_that_never_joins_is_named_after_start_timeout(spark, no_rank_left_behind):
    started = time.monotonic()
    with pytest.raises(RankFailedError) as info:
        HorovodRunner(np=2, start_timeout_s=10).run(init_and_return, obj=SlowToLoadOnRankOne())
    elapsed = time.monotonic() - started
    assert info.value.rank == 1 and isinstance(info.value, RendezvousError), type(info.value)
    assert "never reached hvd.init() within start_timeout_s=10" in str(info.value)
    assert "Ranks that never reached hvd.init(): [1]" in str(info.value)
    assert elapsed < 60, elapsed


def hang_in_training():
    import time

    import horovod.torch as hvd

    hvd.init()
    print("training", flush=True)
    time.sleep(3600)


def test_training_timeout_stops_a_hung_job(spark, no_rank_left_behind):
    started = time.monotonic()
    with pytest.raises(RankFailedError, match=r"still running when training_timeout_s=15 ran out"):
        HorovodRunner(np=2, training_timeout_s=15).run(hang_in_training)
    assert time.monotonic() - started < 75


def train_until_cancelled():
    import time

    import horovod.torch as hvd
    import torch

    hvd.init()
    deadline = time.monotonic() + 120  # bounded: the test cancels the job long before
    while time.monotonic() < deadline:
        hvd.allreduce(torch.ones(1))
        time.sleep(0.05)


def test_a_job_cancelled_by_other_code_is_a_job_cancelled_error_and_stops_every_rank(
    spark, tmp_path, no_rank_left_behind
):
    """Other code on the driver cancels the application's jobs (SparkContext.cancelAllJobs()) once both ranks have
    joined, as the driver's progress.json says: Spark's SPARK_JOB_CANCELLED becomes JobCancelledError."""
    import json
    import threading

    def cancel_once_training() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                phase = json.loads((tmp_path / "progress.json").read_text()).get("phase") or ""
            except (OSError, ValueError):
                phase = ""
            if phase.startswith("training: all 2 ranks joined"):
                spark.sparkContext.cancelAllJobs()
                return
            time.sleep(0.1)

    canceller = threading.Thread(target=cancel_once_training, daemon=True)
    canceller.start()
    with pytest.raises(JobCancelledError) as info:
        HorovodRunner(np=2, artifact_dir=str(tmp_path)).run(train_until_cancelled)
    canceller.join(timeout=10)
    assert info.value.job_id is not None and info.value.reason == "as part of cancellation of all jobs", info.value
    assert str(info.value).startswith(
        f"Spark cancelled the barrier job (job {info.value.job_id}) from outside this "
        "run: as part of cancellation of all jobs."
    ), info.value
    assert isinstance(info.value, LaunchError) and not isinstance(info.value, RankFailedError)


def kill_my_launcher():
    import os
    import signal

    import horovod.torch as hvd
    import torch

    hvd.init()
    if hvd.rank() == 1:
        os.kill(os.getppid(), signal.SIGKILL)  # the Spark Python worker running this rank's task
    for _ in range(600):
        hvd.allreduce(torch.ones(1))


def test_python_worker_dying_fails_with_sparks_reason(spark, no_rank_left_behind):
    with pytest.raises(LaunchError) as info:
        HorovodRunner(np=2).run(kill_my_launcher)
    assert "Python worker exited unexpectedly" in str(info.value) or "crashed" in str(info.value)


def test_executor_python_without_horovod_fails_fast_naming_the_interpreter(tmp_path, spark_env):
    """A separate application whose executors use a bare interpreter (no Horovod, no cloudpickle)."""
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True, timeout=120)
    script = tmp_path / "app.py"
    script.write_text(
        "import sys\n"
        "from pyspark.sql import SparkSession\n"
        "from airflow_provider_horovod.runtime import HorovodRunner, LaunchError\n"
        "spark = (SparkSession.builder.master('local[2]').config('spark.driver.host', '127.0.0.1')\n"
        "         .config('spark.driver.bindAddress', '127.0.0.1').config('spark.ui.enabled', 'false').getOrCreate())\n"
        "spark.sparkContext.setLogLevel('OFF')\n"
        "def main():\n"
        "    return 1\n"
        "try:\n"
        "    HorovodRunner(np=2).run(main)\n"
        "except LaunchError as err:\n"
        "    print('LAUNCH ERROR:', err)\n"
        "    sys.exit(7)\n"
    )
    env = {**os.environ, "PYSPARK_PYTHON": str(bare / "bin" / "python"), "SPARK_LOCAL_IP": "127.0.0.1"}
    started = time.monotonic()
    proc = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 7, proc.stdout[-3000:] + proc.stderr[-3000:]
    first_line = proc.stdout.split("LAUNCH ERROR: ", 1)[1].splitlines()[0]
    assert "is not importable by the executor's Python" in first_line  # the cause first, not Py4J's preamble
    assert str(bare / "bin" / "python") in first_line
    assert time.monotonic() - started < 120
