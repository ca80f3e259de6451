"""HorovodRunner writing its model to an S3 artifact directory (moto's server on 127.0.0.1) through fsspec."""

from __future__ import annotations

import pytest

from airflow_provider_horovod.runtime import HorovodRunner
from airflow_provider_horovod.runtime.artifacts import list_artifacts
from tests.s3_server import s3_server  # noqa: F401  (fixture)

pytestmark = pytest.mark.spark


def save_model_to_object_store():
    import fsspec
    import horovod.torch as hvd
    import torch

    from airflow_provider_horovod.runtime import artifact_dir

    hvd.init()
    model = torch.nn.Linear(4, 2)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    if hvd.rank() == 0:
        path = f"{artifact_dir()}/model.pt"
        with fsspec.open(path, "wb") as f:
            torch.save(model.state_dict(), f)
        return {"model_path": path, "size": hvd.size()}
    return None


def test_rank_writes_model_to_s3(spark, s3_server, monkeypatch):  # noqa: F811
    for name, value in s3_server.env.items():
        monkeypatch.setenv(name, value)  # the driver side (this process) lists with the same credentials
    fs = s3_server.fs()
    fs.mkdir("models")

    result = HorovodRunner(np=2, artifact_dir="s3://models/run", env=s3_server.env).run(save_model_to_object_store)

    assert result == {"model_path": "s3://models/run/model.pt", "size": 2}
    assert list_artifacts("s3://models/run") == ["s3://models/run/model.pt"]
    assert fs.exists("models/run/model.pt") and fs.size("models/run/model.pt") > 0
    import io

    import torch

    state = torch.load(io.BytesIO(fs.cat("models/run/model.pt")))
    assert set(state) == {"weight", "bias"}


def log_to_tensorboard():
    import horovod.torch as hvd
    import torch

    from airflow_provider_horovod.runtime import tensorboard_dir

    hvd.init()
    for step in range(3):
        hvd.allreduce(torch.tensor([float(step)]), name="metric")
    if hvd.rank() != 0:
        return None
    from torch.utils.tensorboard import SummaryWriter

    logdir = tensorboard_dir()
    with SummaryWriter(logdir) as writer:
        writer.add_scalar("metric", 0.5, 1)
    import os

    return {"local_logdir": logdir, "local_timeline": os.environ["HOROVOD_TIMELINE"]}


def test_tensorboard_and_timeline_reach_s3(spark, s3_server, monkeypatch, tmp_path):  # noqa: F811
    import json
    import os

    from airflow_provider_horovod.runtime.observability import tensorboard_location

    for name, value in s3_server.env.items():
        monkeypatch.setenv(name, value)
    fs = s3_server.fs()
    fs.mkdir("observed")

    local = HorovodRunner(np=2, artifact_dir="s3://observed/run", env=s3_server.env, timeline=True).run(
        log_to_tensorboard
    )

    # the ranks wrote to local stand-ins, copied to the bucket and removed when the ranks ended
    assert not os.path.exists(local["local_logdir"]) and not os.path.exists(local["local_timeline"])
    paths = list_artifacts("s3://observed/run")
    assert "s3://observed/run/horovod_timeline.json" in paths
    assert tensorboard_location("s3://observed/run", paths) == "s3://observed/run/tensorboard"
    events = [p for p in paths if p.startswith("s3://observed/run/tensorboard/") and "tfevents" in p]
    assert len(events) == 1
    (tmp_path / "tb").mkdir()
    fs.get(events[0], str(tmp_path / "tb" / os.path.basename(events[0])))
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(tmp_path / "tb"))
    acc.Reload()
    assert [(s.step, s.value) for s in acc.Scalars("metric")] == [(1, 0.5)]
    records = json.loads(fs.cat("observed/run/horovod_timeline.json"))
    assert "ALLREDUCE" in {r.get("name") for r in records}
