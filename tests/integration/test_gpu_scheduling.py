"""
GPUs from Spark resource scheduling, without GPUs: a standalone worker whose discovery script reports fake GPUs
``2..5``; each rank reports the ``CUDA_VISIBLE_DEVICES`` it saw and its local rank (no CUDA is touched).
"""

from __future__ import annotations

import json
import os

import pytest

from tests.client_script import run_client_script
from tests.standalone import standalone_cluster

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]

FAKE_GPUS = ["2", "3", "4", "5"]

APP = """
import json, sys
from pyspark.sql import SparkSession
from airflow_provider_horovod.runtime import HorovodRunner, LaunchError

master, np_, conf, runner_kwargs = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3]), json.loads(sys.argv[4])
builder = (SparkSession.builder.master(master).appName("horovod-gpu-test")
           .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
           .config("spark.ui.enabled", "false").config("spark.task.maxFailures", "1")
           .config("spark.scheduler.barrier.maxConcurrentTasksCheck.interval", "2s")
           .config("spark.scheduler.barrier.maxConcurrentTasksCheck.maxFailures", "20"))
for key, value in conf.items():
    builder = builder.config(key, value)
spark = builder.getOrCreate()
spark.sparkContext.setLogLevel("ERROR")

def main():
    import os
    import horovod.torch as hvd
    hvd.init()
    mine = {"rank": hvd.rank(), "local_rank": hvd.local_rank(), "cuda": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "nccl_if": os.environ.get("NCCL_SOCKET_IFNAME"), "gloo_if": os.environ.get("HOROVOD_GLOO_IFACE")}
    return sorted(hvd.allgather_object(mine), key=lambda r: r["rank"])

def main_torch():
    import os
    import torch.distributed as dist
    dist.init_process_group("gloo")
    mine = {"rank": dist.get_rank(), "local_rank": int(os.environ["LOCAL_RANK"]),
            "cuda": os.environ.get("CUDA_VISIBLE_DEVICES"), "nccl_if": os.environ.get("NCCL_SOCKET_IFNAME"),
            "gloo_if": os.environ.get("GLOO_SOCKET_IFNAME")}
    everyone = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, mine)
    return sorted(everyone, key=lambda r: r["rank"])

try:
    fn = main_torch if runner_kwargs.get("launcher") == "torch" else main
    out = {"ranks": HorovodRunner(np=np_, **runner_kwargs).run(fn)}
except LaunchError as err:
    out = {"launch_error": str(err)}
print("RESULT " + json.dumps(out), flush=True)
spark.stop()
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    work = tmp_path_factory.mktemp("gpu-standalone")
    script = work / "fake_gpus.sh"
    script.write_text("#!/bin/sh\necho '" + json.dumps({"name": "gpu", "addresses": FAKE_GPUS}) + "'\n")
    script.chmod(0o755)
    with standalone_cluster(
        workers=1,
        cores_per_worker=2,
        work_dir=work,
        worker_conf={
            "spark.worker.resource.gpu.amount": str(len(FAKE_GPUS)),
            "spark.worker.resource.gpu.discoveryScript": str(script),
        },
    ) as c:
        yield c


def _run(cluster, tmp_path, np_: int, conf: dict, **runner_kwargs) -> dict:
    # cluster.env has PYSPARK_PYTHON, PYSPARK_DRIVER_PYTHON = sys.executable and SPARK_LOCAL_IP = 127.0.0.1
    result, _ = run_client_script(
        APP,
        tmp_path / "app.py",
        [cluster.master_url, str(np_), json.dumps(conf), json.dumps(runner_kwargs)],
        env=cluster.env,
        timeout_s=240,
        context=lambda: cluster.log_tail(15),
    )
    return result


def _ranks(result: dict) -> list[dict]:
    assert "ranks" in result, result
    return result["ranks"]


def _gpu_conf(per_executor: int, per_task: int, **extra: str) -> dict:
    return {
        "spark.executor.resource.gpu.amount": str(per_executor),
        "spark.task.resource.gpu.amount": str(per_task),
        "spark.executor.cores": "2",
        **extra,
    }


def test_one_gpu_on_the_host(cluster, tmp_path):
    ranks = _ranks(_run(cluster, tmp_path, 1, _gpu_conf(1, 1), use_gpu=True))
    assert len(ranks) == 1 and ranks[0]["local_rank"] == 0
    assert ranks[0]["cuda"] in FAKE_GPUS
    assert ranks[0]["nccl_if"] == ranks[0]["gloo_if"] == "lo"


def test_two_gpus_on_the_host_host_visibility(cluster, tmp_path):
    ranks = _ranks(_run(cluster, tmp_path, 2, _gpu_conf(2, 1), use_gpu=True))
    assert [r["local_rank"] for r in ranks] == [0, 1]
    devices = ranks[0]["cuda"].split(",")
    # every rank sees the host's two task GPUs in the same order; device local_rank differs per rank
    assert [r["cuda"] for r in ranks] == [ranks[0]["cuda"]] * 2
    assert len(devices) == 2 and len(set(devices)) == 2 and set(devices) <= set(FAKE_GPUS)
    assert all(r["nccl_if"] == r["gloo_if"] == "lo" for r in ranks)


def test_torch_distributed_ranks_index_their_hosts_gpus_with_local_rank(cluster, tmp_path):
    ranks = _ranks(_run(cluster, tmp_path, 2, _gpu_conf(2, 1), use_gpu=True, launcher="torch"))
    assert [r["local_rank"] for r in ranks] == [0, 1]
    devices = ranks[0]["cuda"].split(",")
    # as with Horovod: both see the host's two task GPUs in one order, torch.cuda.set_device(LOCAL_RANK) is each one's
    assert [r["cuda"] for r in ranks] == [ranks[0]["cuda"]] * 2
    assert len(devices) == 2 and len(set(devices)) == 2 and set(devices) <= set(FAKE_GPUS)
    assert all(r["nccl_if"] == r["gloo_if"] == "lo" for r in ranks)


def test_two_gpus_on_the_host_rank_visibility(cluster, tmp_path):
    ranks = _ranks(_run(cluster, tmp_path, 2, _gpu_conf(2, 1), use_gpu=True, gpu_visibility="rank"))
    seen = [r["cuda"] for r in ranks]
    assert all(len(s.split(",")) == 1 for s in seen) and len(set(seen)) == 2 and set(seen) <= set(FAKE_GPUS)


def test_two_gpus_per_task(cluster, tmp_path):
    host = _ranks(_run(cluster, tmp_path, 2, _gpu_conf(4, 2), use_gpu=True))
    rank = _ranks(_run(cluster, tmp_path, 2, _gpu_conf(4, 2), use_gpu=True, gpu_visibility="rank"))
    # host: both see all four; device local_rank is each rank's first GPU
    assert [r["cuda"] for r in host] == [host[0]["cuda"]] * 2
    assert sorted(host[0]["cuda"].split(",")) == FAKE_GPUS
    # rank: two each, disjoint
    own = [set(r["cuda"].split(",")) for r in rank]
    assert [len(s) for s in own] == [2, 2] and own[0] | own[1] == set(FAKE_GPUS)


def test_addresses_map_through_the_executors_cuda_visible_devices(cluster, tmp_path):
    conf = _gpu_conf(2, 1, **{"spark.executorEnv.CUDA_VISIBLE_DEVICES": "10,11,12,13,14,15"})
    ranks = _ranks(_run(cluster, tmp_path, 2, conf, use_gpu=True, gpu_visibility="rank"))
    seen = {r["cuda"] for r in ranks}
    assert len(seen) == 2 and seen <= {"12", "13", "14", "15"}  # Spark's 2..5 are indices into that list


def test_without_use_gpu_ranks_see_no_gpu(cluster, tmp_path):
    ranks = _ranks(_run(cluster, tmp_path, 2, _gpu_conf(2, 1)))
    assert [r["cuda"] for r in ranks] == ["", ""]


def test_use_gpu_without_gpu_scheduling_fails_up_front(cluster, tmp_path):
    message = _run(cluster, tmp_path, 2, {"spark.executor.cores": "2"}, use_gpu=True)["launch_error"]
    assert "spark.task.resource.gpu.amount is not set" in message
    assert "spark.executor.resource.gpu.amount" in message


def test_use_gpu_on_local_spark_fails_before_any_task(spark):
    from airflow_provider_horovod.runtime import HorovodRunner, LaunchError

    with pytest.raises(LaunchError, match="spark.task.resource.gpu.amount is not set"):
        HorovodRunner(np=2, use_gpu=True).run(os.getpid)
