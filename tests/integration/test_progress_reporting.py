"""
report() under real ranks: np=2 on a local Spark barrier stage (Horovod) and np=-2 on the driver (torch.distributed);
the history and the snapshot in the artifact directory (local, and moto's S3 on 127.0.0.1), the progress line on
the driver's stdout, rank 0's last metrics.
"""

from __future__ import annotations

import json

import pytest

from airflow_provider_horovod.runtime import HorovodRunner, TorchDistributor
from tests.s3_server import s3_server  # noqa: F401  (fixture)

pytestmark = pytest.mark.spark


def horovod_steps(steps):
    import time

    import horovod.torch as hvd
    import torch

    from airflow_provider_horovod.runtime import report

    hvd.init()
    for step in range(1, steps + 1):
        loss = hvd.allreduce(torch.tensor([1.0 / step])).item()
        report(step=step, total_steps=steps, epoch=step // 50, loss=loss)
        time.sleep(0.01)
    return hvd.rank()


def torch_steps(steps):
    import time

    import torch.distributed as dist

    from airflow_provider_horovod.runtime import report

    dist.init_process_group("gloo")
    for step in range(1, steps + 1):
        report(step=step, acc=step / steps)  # no total: rate and elapsed time
        time.sleep(0.02 if dist.get_rank() == 0 else 0.04)
    return dist.get_rank()


def _history(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_reports_of_a_barrier_job_reach_the_artifact_dir_and_the_driver_log(spark, tmp_path, capfd):
    runner = HorovodRunner(np=2, artifact_dir=str(tmp_path))
    assert runner.run(horovod_steps, steps=300) == 0
    history = _history(tmp_path / "metrics.jsonl")
    assert 2 <= len(history) < 300 and {r["rank"] for r in history} == {0}  # rank 0's, sampled
    assert history[-1]["step"] == 300 and history[-1]["metrics"]["loss"] == pytest.approx(1.0 / 300)
    assert [r["step"] for r in history] == sorted(r["step"] for r in history)
    snapshot = json.loads((tmp_path / "progress.json").read_text())
    assert snapshot["state"] == "finished" and snapshot["percent"] == 100.0
    assert snapshot["ranks"]["1"]["step"] == 300  # the other rank's last step is kept too
    assert runner.last_metrics == history[-1]["metrics"]
    out = capfd.readouterr().out
    assert "airflow-provider-horovod: progress: step 300/300 (100%)" in out


def test_reports_on_the_driver_with_torch_distributed_show_the_slower_rank(spark_env, tmp_path, capfd):
    distributor = TorchDistributor(num_processes=2, local_mode=True, use_gpu=False, artifact_dir=str(tmp_path))
    assert distributor.run(torch_steps, 250) == 0
    snapshot = json.loads((tmp_path / "progress.json").read_text())
    assert snapshot["total_steps"] is None and snapshot["step"] == 250 and snapshot["steps_per_s"] > 0
    assert distributor.last_metrics == {"acc": 1.0}
    lines = [line for line in capfd.readouterr().out.splitlines() if "airflow-provider-horovod: progress:" in line]
    assert lines and "elapsed" in lines[-1]
    assert any("slowest rank 1 at step" in line for line in lines[:-1])  # rank 1 takes twice as long per step


def test_the_history_goes_to_object_storage(spark, tmp_path, s3_server, monkeypatch):  # noqa: F811
    for name, value in s3_server.env.items():
        monkeypatch.setenv(name, value)  # the driver writes the files with the same credentials as the ranks
    fs = s3_server.fs()
    fs.mkdir("metrics")
    HorovodRunner(np=2, artifact_dir="s3://metrics/run", env=s3_server.env).run(horovod_steps, steps=40)
    history = [json.loads(line) for line in fs.cat("metrics/run/metrics.jsonl").decode().splitlines()]
    assert history[-1]["step"] == 40
    assert json.loads(fs.cat("metrics/run/progress.json"))["state"] == "finished"


def _phase_seen(prefix, timeout_s=60.0):
    """Wait (bounded) until the driver's progress.json shows a phase starting with ``prefix``; return it."""
    import json as json_
    import os
    import time

    from airflow_provider_horovod.runtime import artifact_dir

    path, deadline, phase = os.path.join(artifact_dir(), "progress.json"), time.monotonic() + timeout_s, None
    while time.monotonic() < deadline:
        try:
            with open(path) as f:
                phase = json_.load(f).get("phase")
        except (OSError, ValueError):  # not written yet, or replaced while read
            phase = None
        if phase and phase.startswith(prefix):
            return phase
        time.sleep(0.1)
    raise AssertionError(f"progress.json never showed {prefix!r} (last phase: {phase!r})")


def _shared(seen):
    """Rank 1's observation, for rank 0 after the next collective: a file in the job's artifact directory."""
    import os

    from airflow_provider_horovod.runtime import artifact_dir

    path = os.path.join(artifact_dir(), "rank-1-saw.txt")
    if seen is not None:
        with open(path, "w") as f:
            f.write(seen)
    return path


def horovod_rendezvous_seen():
    """Rank 1 joins only once the driver shows rank 0 alone in the rendezvous; rank 0 then waits for 'all joined'."""
    import os

    import horovod.torch as hvd
    import torch

    rank = int(os.environ["HOROVOD_RANK"])
    path = _shared(_phase_seen("rendezvous: 1/2 ranks in hvd.init()") if rank == 1 else None)
    hvd.init()
    hvd.allreduce(torch.ones(1), name="written")  # rank 1 wrote what it saw before this
    return [open(path).read(), _phase_seen("training: all 2 ranks joined hvd.init()")] if rank == 0 else None


def torch_rendezvous_seen():
    import os

    import torch.distributed as dist

    rank = int(os.environ["RANK"])
    path = _shared(_phase_seen("rendezvous: 1/2 ranks in init_process_group()") if rank == 1 else None)
    dist.init_process_group("gloo")
    dist.barrier()
    return [open(path).read(), _phase_seen("training: all 2 ranks joined init_process_group()")] if rank == 0 else None


def test_before_the_first_report_the_phase_follows_the_ranks_through_the_rendezvous(spark, tmp_path):
    runner = HorovodRunner(np=2, artifact_dir=str(tmp_path / "horovod"))
    assert runner.run(horovod_rendezvous_seen) == [
        "rendezvous: 1/2 ranks in hvd.init(), 0 joined",
        "training: all 2 ranks joined hvd.init(), no report yet",
    ]
    distributor = TorchDistributor(
        num_processes=2, local_mode=True, use_gpu=False, artifact_dir=str(tmp_path / "torch")
    )
    assert distributor.run(torch_rendezvous_seen) == [
        "rendezvous: 1/2 ranks in init_process_group(), 0 joined",
        "training: all 2 ranks joined init_process_group(), no report yet",
    ]
