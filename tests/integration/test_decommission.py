"""
Spot and preemptible nodes with Spark's decommissioning (``spark.decommission.enabled``), on a real standalone cluster
of three one-core workers: the worker holding rank 1 gets its termination notice (SIGPWR, on which a standalone
worker decommissions itself) and is SIGKILLed a few seconds later, as a reclaimed spot node is. The rank trains on
until its machine goes; the restart (``max_restarts=1``) names the decommissioning and resumes from the latest
checkpoint on the spare worker, in the same run.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.client_script import BackgroundScript
from tests.standalone import standalone_cluster

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]

APP = """
import json, sys
from pyspark.sql import SparkSession
from airflow_provider_horovod.runtime import HorovodRunner

spark = (SparkSession.builder.master(sys.argv[1]).appName("horovod-decommission-test")
         .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
         .config("spark.executor.cores", "1").config("spark.cores.max", "2")
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
NOTICE_STEPS = 6
"""Steps the decommissioning executor's rank trains between the notice and its machine going (a cloud's notice is 30 s
to 2 min)."""


def _steps(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().split("\n")[:-1]] if path.exists() else []


def test_a_decommissioned_worker_s_rank_trains_until_it_goes_then_the_job_restarts_naming_it(tmp_path: Path):
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
            while len(_steps(record)) < 12:
                assert time.monotonic() < deadline, cluster.log_tail()
                time.sleep(0.2)
            executor = cluster.rank_executor(1)
            assert executor is not None
            spot = cluster.worker_running(executor.pid)
            cluster.decommission_worker(spot)  # the termination notice
            noticed = len(_steps(record))
            deadline = time.monotonic() + 60
            while len(_steps(record)) < noticed + NOTICE_STEPS:  # the rank on the decommissioning executor trains on
                assert time.monotonic() < deadline, cluster.log_tail()
                time.sleep(0.2)
            cluster.kill_worker(spot)  # the machine goes
            result, stdout = script.join(timeout_s=480)
    [cause] = result["causes"]
    assert cause.startswith("executor ") and "lost (Executor decommission:" in cause, cause
    assert "airflow-provider-horovod: restart 1/1: " + cause in stdout, stdout[-3000:]
    steps = _steps(record)
    first = [r["step"] for r in steps if r["restart"] == 0]
    second = [r["step"] for r in steps if r["restart"] == 1]
    latest = max(s for s in first if s % 5 == 0)
    assert second == list(range(latest + 1, 41)), (first[-3:], second[:3])  # resumed from it, on the spare worker
    assert len(first) - latest <= 5  # at most one checkpoint interval trained again
    assert result["value"] == {"restart_count": 1, "resumed_at": latest}
