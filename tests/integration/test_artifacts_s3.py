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
