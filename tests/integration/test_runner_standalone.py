"""HorovodRunner on a real Spark standalone cluster (a master and two workers on 127.0.0.1): two ranks on two
executors, a job that can never have its slots, and a frozen executor found by its missing heartbeats."""

from __future__ import annotations

import contextlib
import time

import psutil
import pytest

from tests.client_script import BackgroundScript, run_client_script
from tests.standalone import standalone_cluster

pytestmark = [pytest.mark.spark, pytest.mark.timeout(400)]

APP = """
import json, sys
from pyspark.sql import SparkSession
from airflow_provider_horovod.runtime import HorovodRunner, LaunchError

spark = (SparkSession.builder.master(sys.argv[1]).appName("horovod-standalone-test")
         .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
         .config("spark.master.ui.port", sys.argv[4])  # where the driver reads the master's state
         .config("spark.ui.enabled", "false")
         .config("spark.scheduler.barrier.maxConcurrentTasksCheck.interval", "2s")
         .config("spark.scheduler.barrier.maxConcurrentTasksCheck.maxFailures", "3").getOrCreate())
spark.sparkContext.setLogLevel("ERROR")

def main():
    import os
    import horovod.torch as hvd, torch
    hvd.init()
    total = hvd.allreduce(torch.tensor([float(hvd.rank() + 1)]), op=hvd.Sum)
    return {"rank": hvd.rank(), "size": hvd.size(), "local_size": hvd.local_size(), "total": total.item(),
            "iface": os.environ["HOROVOD_GLOO_IFACE"]}

out = {"ok": HorovodRunner(np=int(sys.argv[2])).run(main)} if sys.argv[3] == "ok" else {}
if sys.argv[3] == "too-many":
    try:
        HorovodRunner(np=3).run(main)
    except LaunchError as err:
        out = {"launch_error": str(err)}
print("RESULT " + json.dumps(out), flush=True)
spark.stop()
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with standalone_cluster(workers=2, cores_per_worker=1, work_dir=tmp_path_factory.mktemp("standalone")) as c:
        yield c


def _run(cluster, tmp_path, *args: str) -> dict:
    # cluster.env has PYSPARK_PYTHON, PYSPARK_DRIVER_PYTHON = sys.executable and SPARK_LOCAL_IP = 127.0.0.1
    ui_port = cluster.web_ui_url.rsplit(":", 1)[1]
    result, _ = run_client_script(
        APP, tmp_path / "app.py", [cluster.master_url, *args, ui_port], env=cluster.env, timeout_s=300
    )
    return result


def test_two_ranks_on_two_executors(cluster, tmp_path):
    result = _run(cluster, tmp_path, "2", "ok")["ok"]
    # both executors are on 127.0.0.1: one host, two local ranks, rendezvous over loopback
    assert result == {"rank": 0, "size": 2, "local_size": 2, "total": 3.0, "iface": "lo"}


def test_np_above_the_clusters_slots_fails_fast_with_the_numbers(cluster, tmp_path):
    """Read from the master's state page before the stage is submitted: no waiting for slots that cannot come."""
    message = _run(cluster, tmp_path, "3", "too-many")["launch_error"]
    assert message.startswith(
        "np=3 needs 3 task slots at the same time (one barrier task per rank), but this job "
        f"can never have them: the cluster {cluster.master_url} has 2 workers alive with 2 "
        "cores in all; that leaves at most 2 task slots for this job's executors"
    ), message
    assert "Lower np to 2 or add workers" in message


FROZEN_APP = """
import json, sys, time
from pyspark.sql import SparkSession
from airflow_provider_horovod.runtime import HorovodRunner

spark = (SparkSession.builder.master(sys.argv[1]).appName("horovod-frozen-executor-test")
         .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
         .config("spark.master.ui.port", sys.argv[3])
         .config("spark.ui.enabled", "false")
         .config("spark.network.timeout", "120s")  # Spark's own detection of a silent executor: Spark's default
         .getOrCreate())
spark.sparkContext.setLogLevel("ERROR")

def main(out, steps, freeze_at):
    import os, time
    import horovod.torch as hvd, torch
    from airflow_provider_horovod.runtime import load_checkpoint, restart_count, save_checkpoint

    hvd.init()
    resumed = load_checkpoint()
    start = 0 if resumed is None else resumed[1]
    for step in range(start + 1, steps + 1):
        hvd.allreduce(torch.ones(1), name=f"step{step}")
        if step % 5 == 0:
            save_checkpoint({"step": step}, step=step)
        if restart_count() == 0 and hvd.rank() == 1 and step == freeze_at:
            with open(os.path.join(out, "frozen.pid"), "w") as f:
                f.write(str(os.getpid()))
            time.sleep(300)  # the test freezes this rank's whole executor meanwhile
    return {"restart_count": restart_count(), "resumed_at": start, "size": hvd.size()}

runner = HorovodRunner(np=2, max_restarts=1, heartbeat_timeout_s=8, checkpoint_dir=sys.argv[2] + "/checkpoints",
                       start_timeout_s=120)
started = time.time()
value = runner.run(main, out=sys.argv[2], steps=20, freeze_at=12)
print("RESULT " + json.dumps({"value": value, "restarts": [r.to_dict() for r in runner.restarts],
                              "ended": time.time()}), flush=True)
spark.stop()
"""


def _executor_tree(rank_pid: int) -> list[psutil.Process]:
    """The executor JVM that runs ``rank_pid`` (an ancestor), then every process under it: a frozen host's view."""
    proc = psutil.Process(rank_pid)
    while "CoarseGrainedExecutorBackend" not in " ".join(proc.cmdline()):
        proc = proc.parent()
        assert proc is not None, f"no executor JVM above {rank_pid}"
    return [proc, *proc.children(recursive=True)]


def test_a_frozen_executor_is_found_by_its_heartbeat_replaced_and_the_job_restarts(cluster, tmp_path):
    """
    Rank 1's whole executor (its JVM, Python workers, launcher and rank) is stopped with SIGSTOP, as a frozen or
    cut-off host would be: no process dies, so Spark would wait spark.network.timeout (120 s) and rank 0 its Gloo
    timeout. The driver misses the task's heartbeats for heartbeat_timeout_s=8, cancels the attempt, has Spark kill
    that executor and start another, and the restart resumes from the checkpoint.
    """
    ui_port = cluster.web_ui_url.rsplit(":", 1)[1]
    pid_file = tmp_path / "frozen.pid"
    frozen: list[psutil.Process] = []
    try:
        with BackgroundScript(
            FROZEN_APP, tmp_path / "app.py", [cluster.master_url, str(tmp_path), ui_port], env=cluster.env,
            timeout_s=300, context=cluster.log_tail,
        ) as script:  # fmt: skip
            script.wait_for_file(pid_file, timeout_s=240)
            frozen = _executor_tree(int(pid_file.read_text()))
            for proc in frozen:
                proc.suspend()
            frozen_at = time.time()
            result, _ = script.join(timeout_s=280)
            jvm_state = "gone" if not frozen[0].is_running() else frozen[0].status()
    finally:
        for proc in frozen:  # what the frozen host left: its Python processes, still stopped
            with contextlib.suppress(psutil.Error):
                proc.kill()
    assert result["value"] == {"restart_count": 1, "resumed_at": 10, "size": 2}, result
    (restart,) = result["restarts"]
    assert restart["cause"].startswith("executor ") and "lost (no heartbeat for " in restart["cause"], restart
    assert "holding rank 1" in restart["cause"], restart
    assert jvm_state == "gone", f"Spark did not replace the frozen executor: its JVM is {jvm_state}"
    took_s = result["ended"] - frozen_at
    # heartbeat_timeout_s (8) + the executor's kill (the worker's 10 s grace for SIGTERM) + a new executor + the
    # restart: far below the 120 s Spark alone would wait before even noticing
    assert took_s < 80, f"the frozen executor cost {took_s:.0f} s"
    print(f"frozen executor: the job ended {took_s:.1f} s after the freeze; {restart['cause']}")
