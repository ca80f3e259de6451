"""The Horovod Timeline's closing and the TensorBoard directory's discovery (runtime/observability.py)."""

from __future__ import annotations

import json

import pytest

from airflow_provider_horovod.runtime import observability
from airflow_provider_horovod.runtime.artifacts import ARTIFACT_DIR_ENV
from airflow_provider_horovod.runtime.observability import (
    ENV_TIMELINE,
    close_timeline,
    start_timeline,
    tensorboard_dir,
    tensorboard_location,
)

# What Horovod 0.28.1's TimelineWriter leaves behind: "[", then one record per line ending in ",", never "]".
HOROVOD_TIMELINE_TEXT = (
    '[\n{"name": "process_name", "ph": "M", "pid": 0, "args": {"start_time_since_epoch_in_micros":1}},\n'
    '{"ph": "B", "name": "NEGOTIATE_ALLREDUCE", "ts": 10, "pid": 1},\n'
    '{"ph": "E", "ts": 12, "pid": 1},\n'
)


def test_close_timeline_makes_horovods_file_valid_json(tmp_path):
    path = tmp_path / "horovod_timeline.json"
    path.write_text(HOROVOD_TIMELINE_TEXT)
    with pytest.raises(json.JSONDecodeError):
        json.loads(path.read_text())
    close_timeline(str(path))
    records = json.loads(path.read_text())
    assert [r.get("name") for r in records] == ["process_name", "NEGOTIATE_ALLREDUCE", None]
    close_timeline(str(path))  # closing twice changes nothing
    assert json.loads(path.read_text()) == records


@pytest.mark.parametrize("text", ["", "[\n"])
def test_close_timeline_of_an_empty_recording(tmp_path, text):
    path = tmp_path / "t.json"
    path.write_text(text)
    close_timeline(str(path))
    assert path.read_text() == ("" if not text else "[\n]\n")
    close_timeline(str(tmp_path / "missing.json"))  # Horovod never opened it: nothing to do


def test_tensorboard_location_only_when_logs_were_written(tmp_path):
    root = str(tmp_path)
    assert tensorboard_location(root, [f"{root}/model.pt"]) is None
    assert tensorboard_location(root, [f"{root}/tensorboard/events.out.tfevents.1"]) == f"{root}/tensorboard"
    assert tensorboard_location(f"file://{root}", [f"file://{root}/tensorboard/x"]) == f"file://{root}/tensorboard"
    assert tensorboard_location("s3://b/run/", ["s3://b/run/tensorboard/e"]) == "s3://b/run/tensorboard"
    assert tensorboard_location("s3://b/run", ["s3://b/run/tensorboard-old/e"]) is None


def test_tensorboard_dir_outside_a_job(monkeypatch):
    monkeypatch.delenv(ARTIFACT_DIR_ENV, raising=False)
    with pytest.raises(RuntimeError, match="artifact_dir\\(\\) has no directory"):
        tensorboard_dir()


def test_tensorboard_dir_on_object_storage_is_a_local_stand_in(monkeypatch, tmp_path):
    registered = []
    monkeypatch.setattr(observability.atexit, "register", lambda *args: registered.append(args))
    monkeypatch.setattr(observability, "_mirrors", {})
    monkeypatch.setattr(observability, "ensure_dir", lambda location: None)
    monkeypatch.setattr("airflow_provider_horovod.runtime.artifacts.ensure_dir", lambda location: None)
    monkeypatch.setenv(ARTIFACT_DIR_ENV, "s3://bucket/run")
    local = tensorboard_dir()
    assert tensorboard_dir() == local  # one stand-in per location
    assert registered == [(observability._upload, local, "s3://bucket/run/tensorboard")]


def test_start_timeline_points_horovod_at_the_artifact_dir(monkeypatch, tmp_path):
    registered = []
    monkeypatch.setattr(observability.atexit, "register", lambda *args: registered.append(args))
    monkeypatch.setenv(ARTIFACT_DIR_ENV, str(tmp_path / "run"))
    monkeypatch.delenv("HOROVOD_TIMELINE", raising=False)
    start_timeline(0)
    assert registered == []  # not asked for
    monkeypatch.setenv(ENV_TIMELINE, "1")
    start_timeline(1)
    target = str(tmp_path / "run" / "horovod_timeline.json")
    import os

    assert os.environ["HOROVOD_TIMELINE"] == target and registered == []  # every rank enables it; rank 0 writes
    monkeypatch.delenv("HOROVOD_TIMELINE")
    start_timeline(0)
    assert registered == [(observability._finish_timeline, target, None)]
    monkeypatch.setenv("HOROVOD_TIMELINE", "/elsewhere.json")  # the user's own choice wins
    start_timeline(0)
    assert os.environ["HOROVOD_TIMELINE"] == "/elsewhere.json" and len(registered) == 1
