"""A return value XCom cannot store is a clear error that keeps the model paths; per-try artifact dirs."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from airflow_provider_horovod.exceptions import HorovodResultError
from airflow_provider_horovod.operators.common import check_xcom_value
from airflow_provider_horovod.paths import default_artifact_dir


class Model:
    def __init__(self):
        self.weights = [1.0, 2.0]


def test_plain_values_pass():
    check_xcom_value(
        {"model_path": "/m/model.pt", "accuracy": 0.97, "epochs": [1, 2]}, max_bytes=10_000, artifact_paths=[]
    )
    check_xcom_value(None, max_bytes=10, artifact_paths=[])


def test_unstorable_value_names_type_and_keeps_paths():
    with pytest.raises(HorovodResultError) as info:
        check_xcom_value(Model(), max_bytes=10_000, artifact_paths=["/art/try-1/model.pt"])
    message = str(info.value)
    assert "test_xcom_value.Model" in message
    assert "Return what downstream tasks need as plain values" in message
    assert "/art/try-1/model.pt" in message


def test_huge_value_is_refused_with_the_limit():
    with pytest.raises(HorovodResultError, match=r"above max_return_value_bytes=100"):
        check_xcom_value("x" * 1000, max_bytes=100, artifact_paths=["/a/model.pt"])


def test_default_artifact_dir_is_unique_per_try(monkeypatch, tmp_path):
    monkeypatch.setenv("AIRFLOW__HOROVOD__ARTIFACT_ROOT", str(tmp_path))
    ti = SimpleNamespace(
        dag_id="d", run_id="manual__2026-01-01T00:00:00+00:00", task_id="train", try_number=1, map_index=-1
    )
    first = default_artifact_dir({"ti": ti})
    ti.try_number = 2
    second = default_artifact_dir({"ti": ti})
    assert first == str(tmp_path / "d" / "manual__2026-01-01T00~3A00~3A00~2B00~3A00" / "train" / "try-1")
    assert second.endswith("try-2") and first != second
    ti.map_index = 3
    assert default_artifact_dir({"ti": ti}).endswith("/train/map-3/try-2")
