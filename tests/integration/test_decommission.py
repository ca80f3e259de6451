"""
Spot and preemptible nodes with Spark's decommissioning (``spark.decommission.enabled``), on a real standalone cluster
of three one-core workers and an application with a spare executor (``spark.cores.max=3`` for ``np=2``): the worker
holding rank 1 gets its termination notice (SIGPWR, on which a standalone worker decommissions itself). The driver
sees its executor being decommissioned and asks the attempt to stop at its next checkpoint: rank 0 stops right after
saving it, and the job starts again from there on the two other executors (a planned restart, which
``max_restarts=1`` does not count), before the machine goes; no step is trained twice. Then the machine goes
(SIGKILL), which the running job no longer notices. (Without a spare the attempt trains on until the machine goes:
a standalone master starts no executor in place of a decommissioned one before then; the unit tests cover that rule.)
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from tests.client_script import BackgroundScript, read_jsonl
from tests.standalone import standalone_cluster

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]

APP = """
import json, sys
from pyspark.sql import SparkSession
from airflow_provider_horovod.runtime import HorovodRunner

spark = (SparkSession.builder.master(sys.argv[1]).appName("horovod-decommission-test")
         .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
         .config("spark.executor.cores", "1").config("spark.cores.max", "3")
         .config("spark.decommission.enabled", "true")
         .config("spark.ui.enabled", "false").getOrCreate())
spark.sparkContext.setLogLevel("ERROR")

def main(out, steps):
    import json, os, time
    import horovod.torch as hvd, torch
    from airflow_provider_horovod.runtime import load_checkpoint, restart_count, save_checkpoint

    hvd.init()
    resumed = load_checkpoint()
    start = 0 if resumed is None else resumed[1]
    for step in range(start + 1, steps + 1):
        hvd.allreduce(torch.ones(1), name=f"step{step}")
        time.sleep(0.2)
        if hvd.rank() == 0:
            with open(os.path.join(out, "steps.jsonl"), "a") as f:
                f.write(json.dumps({"step": step, "restart": restart_count(), "t": time.time()}) + "\\n")
        if step % 5 == 0:
            save_checkpoint({"step": step}, step=step)
    return {"restart_count": restart_count(), "resumed_at": start}

runner = HorovodRunner(np=2, max_restarts=1, start_timeout_s=120, checkpoint_dir=sys.argv[2] + "/checkpoints")
value = runner.run(main, out=sys.argv[2], steps=40)
print("RESULT " + json.dumps({"value": value, "causes": [r.cause for r in runner.restarts]}), flush=True)
spark.stop()
"""


def test_a_termination_notice_stops_the_job_at_its_next_checkpoint_and_it_goes_on_without_that_machine(tmp_path: Path):
    decommission = {"spark.decommission.enabled": "true"}
    record = tmp_path / "steps.jsonl"
    with standalone_cluster(
        workers=3, cores_per_worker=1, work_dir=tmp_path / "spark", worker_conf=decommission
    ) as cluster:
        with BackgroundScript(
            APP, tmp_path / "app.py", [cluster.master_url, str(tmp_path)], env=cluster.env, timeout_s=480,
            context=cluster.log_tail,
        ) as script:  # fmt: skip
            deadline = time.monotonic() + 240
            while len(read_jsonl(record)) < 12:
                assert time.monotonic() < deadline, cluster.log_tail()
                time.sleep(0.2)
            executor = cluster.rank_executor(1)
            assert executor is not None
            spot = cluster.worker_running(executor.pid)
            cluster.decommission_worker(spot)  # the termination notice
            deadline = time.monotonic() + 120
            while not any(r["restart"] == 1 for r in read_jsonl(record)):  # the restarted attempt trains
                assert time.monotonic() < deadline, cluster.log_tail()
                time.sleep(0.2)
            moved = cluster.rank_executor(1)  # rank 1 of the restarted attempt
            assert moved is not None and cluster.worker_running(moved.pid) != spot
            cluster.kill_worker(spot)  # the machine goes: nothing of the job is left on it
            result, stdout = script.join(timeout_s=480)
    [cause] = result["causes"]
    assert re.fullmatch(
        r"rank 0 stopped after saving checkpoint step \d+: executor \d+ on 127\.0\.0\.1 is being decommissioned", cause
    ), cause
    stop = int(cause.split("checkpoint step ")[1].split(":")[0])
    moving = r"executor \d+ on 127\.0\.0\.1 is being decommissioned \(its machine is going\): rank 0 stops"
    assert re.search(moving, stdout), stdout[-3000:]
    assert f"restart 1 (planned; not counted in max_restarts=1): {cause}; starting again now" in stdout, stdout[-3000:]
    steps = read_jsonl(record)
    assert [r["step"] for r in steps if r["restart"] == 0] == list(range(1, stop + 1))  # to the checkpoint, no further
    assert [r["step"] for r in steps if r["restart"] == 1] == list(range(stop + 1, 41))  # from it: none trained twice
    assert result["value"] == {"restart_count": 1, "resumed_at": stop}
