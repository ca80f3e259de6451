"""
Elastic ranks (``min_np``) on a real Spark standalone cluster (two workers of one core on 127.0.0.1): a worker lost for
good mid-training makes the next attempt run with the one rank that fits (``min_np=1``), resumed from the checkpoint;
once a new worker has joined, a later restart grows back to ``np=2``. The function sees each attempt's world size.
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

spark = (SparkSession.builder.master(sys.argv[1]).appName("horovod-elastic-test")
         .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
         .config("spark.master.ui.port", sys.argv[3])
         .config("spark.ui.enabled", "false").getOrCreate())
spark.sparkContext.setLogLevel("ERROR")

def main(out, steps):
    import os, signal, time
    import horovod.torch as hvd, torch
    from airflow_provider_horovod.runtime import load_checkpoint, restart_count, save_checkpoint

    hvd.init()
    attempt, size = restart_count(), hvd.size()
    resumed = load_checkpoint()
    start = 0 if resumed is None else resumed[1]
    if hvd.rank() == 0:
        with open(os.path.join(out, "attempts.jsonl"), "a") as f:
            f.write(json.dumps({"attempt": attempt, "size": size, "resumed_at": start}) + "\\n")
    for step in range(start + 1, steps + 1):
        hvd.allreduce(torch.ones(1), name=f"step{step}")
        if step % 2 == 0:
            save_checkpoint({"step": step}, step=step)
        if attempt == 0 and hvd.rank() == 1 and step == 6:  # the test kills this rank's worker, for good
            with open(os.path.join(out, "lost.pid"), "w") as f:
                f.write(str(os.getpid()))
            time.sleep(300)
        if attempt == 1 and step == 8:  # one rank now; the test starts a new worker, then this rank ends
            with open(os.path.join(out, "shrunk"), "w") as f:
                f.write("1")
            deadline = time.monotonic() + 240
            while not os.path.exists(os.path.join(out, "grown")) and time.monotonic() < deadline:
                time.sleep(0.2)
            os.kill(os.getpid(), signal.SIGKILL)
    return {"attempt": attempt, "size": size, "resumed_at": start}

runner = HorovodRunner(np=2, min_np=1, elastic_wait_s=6, max_restarts=2, start_timeout_s=120,
                       checkpoint_dir=sys.argv[2] + "/checkpoints")
value = runner.run(main, out=sys.argv[2], steps=12)
print("RESULT " + json.dumps({"value": value, "causes": [r.cause for r in runner.restarts]}), flush=True)
spark.stop()
"""


def test_a_worker_lost_for_good_shrinks_the_job_to_min_np_and_a_new_worker_grows_it_back(tmp_path: Path):
    # the master drops a dead worker after 6 s without its heartbeat (Spark's default: 60 s), so that the core it
    # offered stops counting and the new worker gets this application's second executor; the workers read the same
    # setting for their heartbeat interval (a quarter of it)
    timeout = {"spark.worker.timeout": "6"}
    with standalone_cluster(
        workers=2, cores_per_worker=1, work_dir=tmp_path / "spark", master_conf=timeout, worker_conf=timeout
    ) as cluster:
        ui_port = cluster.web_ui_url.rsplit(":", 1)[1]
        with BackgroundScript(
            APP, tmp_path / "app.py", [cluster.master_url, str(tmp_path), ui_port], env=cluster.env,
            timeout_s=480, context=cluster.log_tail,
        ) as script:  # fmt: skip
            script.wait_for_file(tmp_path / "lost.pid", timeout_s=240)
            lost = cluster.worker_running(int((tmp_path / "lost.pid").read_text()))
            cluster.kill_worker(lost)  # the host is gone: its executor, its rank
            script.wait_for_file(tmp_path / "shrunk", timeout_s=240)
            cluster.restart_worker(lost, timeout_s=120)  # a new machine joins
            deadline = time.monotonic() + 120
            while not any(app["cores"] == 2 for app in cluster.master_json()["activeapps"]):
                assert time.monotonic() < deadline, cluster.master_json()["activeapps"]
                time.sleep(0.5)  # until the master has given the application an executor on the new worker
            (tmp_path / "grown").write_text("go")
            result, stdout = script.join(timeout_s=480)
    attempts = [json.loads(line) for line in (tmp_path / "attempts.jsonl").read_text().splitlines()]
    assert attempts == [
        {"attempt": 0, "size": 2, "resumed_at": 0},
        {"attempt": 1, "size": 1, "resumed_at": 6},  # the lost worker's slot never came back: one rank
        {"attempt": 2, "size": 2, "resumed_at": 8},  # grown back
    ], attempts
    assert result["value"] == {"attempt": 2, "size": 2, "resumed_at": 8}
    first, second = result["causes"]
    assert first.startswith("executor ") and " lost" in first, first
    assert second == "rank 0 killed by SIGKILL", second
    assert "restart 1: 1 of np=2 ranks (min_np=1): all 2 slots did not come back within elastic_wait_s=6 s" in stdout, (
        stdout[-3000:]
    )
