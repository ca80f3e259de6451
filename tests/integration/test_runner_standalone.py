"""HorovodRunner on a real Spark standalone cluster (a master and two workers on 127.0.0.1)."""

from __future__ import annotations

import pytest

from tests.client_script import run_client_script
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
