"""TensorBoard logs (``tensorboard_dir()``) and the Horovod Timeline (``timeline=True``) from real ranks on Spark."""

from __future__ import annotations

import json
import os

import pytest

from airflow_provider_horovod.runtime import HorovodRunner
from airflow_provider_horovod.runtime.artifacts import list_artifacts
from airflow_provider_horovod.runtime.observability import tensorboard_location

pytestmark = pytest.mark.spark


def train_and_log(steps: int) -> dict:
    import horovod.torch as hvd
    import torch

    from airflow_provider_horovod.runtime import tensorboard_dir

    hvd.init()
    writer = None
    if hvd.rank() == 0:
        from torch.utils.tensorboard import SummaryWriter

        writer = SummaryWriter(tensorboard_dir())
    for step in range(steps):
        loss = hvd.allreduce(torch.tensor([1.0 / (step + 1)]), name="loss")
        if writer is not None:
            writer.add_scalar("loss", loss.item(), step)
    if writer is None:
        return {}
    writer.close()
    return {"tensorboard_dir": tensorboard_dir(), "timeline": os.environ.get("HOROVOD_TIMELINE")}


def scalars(logdir: str, tag: str) -> list[tuple[int, float]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(logdir)
    events.Reload()
    return [(s.step, round(s.value, 4)) for s in events.Scalars(tag)]


def timeline_records(path: str) -> list[dict]:
    with open(path) as f:
        return json.load(f)  # Horovod leaves the array open; the rank closes it


def test_barrier_ranks_write_tensorboard_and_timeline(spark, tmp_path):
    artifacts = str(tmp_path / "run")
    result = HorovodRunner(np=2, artifact_dir=artifacts, timeline=True).run(train_and_log, steps=5)

    assert result == {"tensorboard_dir": f"{artifacts}/tensorboard", "timeline": f"{artifacts}/horovod_timeline.json"}
    assert scalars(result["tensorboard_dir"], "loss") == [(s, round(1.0 / (s + 1), 4)) for s in range(5)]
    records = timeline_records(result["timeline"])
    ops = {r["name"] for r in records if r.get("ph") == "B"}
    assert {"NEGOTIATE_ALLREDUCE", "ALLREDUCE"} <= ops
    tensors = {r["args"]["name"] for r in records if r.get("name") == "process_name" and "name" in r.get("args", {})}
    assert any("loss" in t for t in tensors), tensors
    paths = list_artifacts(artifacts)
    assert f"{artifacts}/horovod_timeline.json" in paths
    assert tensorboard_location(artifacts, paths) == f"{artifacts}/tensorboard"


def test_driver_ranks_without_timeline(spark_env, tmp_path):
    artifacts = str(tmp_path / "run")
    result = HorovodRunner(np=-2, artifact_dir=artifacts).run(train_and_log, steps=3)

    assert result == {"tensorboard_dir": f"{artifacts}/tensorboard", "timeline": None}
    assert scalars(result["tensorboard_dir"], "loss") == [(0, 1.0), (1, 0.5), (2, 0.3333)]
    assert not os.path.exists(f"{artifacts}/horovod_timeline.json")  # timeline=False is the default


def test_timeline_needs_an_artifact_dir():
    with pytest.raises(ValueError, match="timeline=True needs artifact_dir"):
        HorovodRunner(np=2, timeline=True)
    with pytest.raises(ValueError, match="timeline must be True or False"):
        HorovodRunner(np=2, artifact_dir="/tmp/x", timeline="yes")
