"""The checkpoint helpers (runtime/checkpoints.py) on a local directory and on moto's S3 server: atomic saves, cut-off
checkpoints never loaded, pruning, rank 0 only, the resume line."""

from __future__ import annotations

import json
import os

import pytest
import torch

from airflow_provider_horovod.runtime import checkpoint_dir, load_checkpoint, save_checkpoint, try_number
from airflow_provider_horovod.runtime.checkpoints import CHECKPOINT_DIR_ENV, TRY_NUMBER_ENV, StopAtCheckpoint
from airflow_provider_horovod.runtime.wire.protocol import ENV_STOP_FLAG
from tests.s3_server import s3_server  # noqa: F401  (fixture)


@pytest.fixture(autouse=True)
def _rank_zero(monkeypatch):
    for name in ("RANK", "HOROVOD_RANK", CHECKPOINT_DIR_ENV, TRY_NUMBER_ENV, ENV_STOP_FLAG):
        monkeypatch.delenv(name, raising=False)


def _state(value: float) -> dict:
    return {"model": {"w": torch.full((3,), value)}, "optimizer": {"state": {}, "param_groups": [{"lr": 0.1}]}}


def _files(path) -> list[str]:
    return sorted(os.listdir(path))


def test_the_latest_saved_step_is_loaded_with_its_state(tmp_path):
    assert load_checkpoint(directory=str(tmp_path / "none-yet")) is None
    save_checkpoint(_state(1.0), step=5, directory=str(tmp_path))
    location = save_checkpoint(_state(2.0), step=10, directory=str(tmp_path))
    state, step = load_checkpoint(directory=str(tmp_path))
    assert step == 10 and torch.equal(state["model"]["w"], torch.full((3,), 2.0))
    assert state["optimizer"]["param_groups"] == [{"lr": 0.1}]
    assert location.startswith(str(tmp_path / "step-000000000010-")) and location.endswith(".pt")
    # nothing but the two checkpoints' data files and manifests: no temporary file left behind
    assert [f for f in _files(tmp_path) if f.endswith(".json")] == ["step-000000000005.json", "step-000000000010.json"]
    assert len(_files(tmp_path)) == 4 and not [f for f in _files(tmp_path) if f.startswith(".")]


def test_a_checkpoint_cut_off_mid_write_is_never_loaded(tmp_path, capsys):
    save_checkpoint(_state(1.0), step=1, directory=str(tmp_path))
    save_checkpoint(_state(2.0), step=2, directory=str(tmp_path))
    # a save of step 3 that died before its manifest: a complete-looking data file, and one still under its temp name
    (tmp_path / "step-000000000003-0123456789ab.pt").write_bytes(
        open(save_checkpoint(_state(3.0), step=99, directory=str(tmp_path / "other")), "rb").read()
    )
    (tmp_path / ".step-000000000004-0123456789ab.pt.tmp-0123456789ab").write_bytes(b"\x80half")
    assert load_checkpoint(directory=str(tmp_path))[1] == 2
    # a manifest whose data file was cut short (or rewritten) is skipped for the one before it, with a line saying so
    manifest = json.loads((tmp_path / "step-000000000002.json").read_text())
    data = tmp_path / manifest["file"]
    data.write_bytes(data.read_bytes()[:-7])
    capsys.readouterr()
    state, step = load_checkpoint(directory=str(tmp_path))
    assert step == 1 and torch.equal(state["model"]["w"], torch.full((3,), 1.0))
    err = capsys.readouterr().err
    assert "skipping checkpoint" in err and "step-000000000002.json" in err and "do not match the manifest" in err


def test_a_damaged_manifest_or_a_missing_data_file_is_skipped_and_said(tmp_path, capsys):
    save_checkpoint(_state(1.0), step=1, directory=str(tmp_path))
    save_checkpoint(_state(2.0), step=2, directory=str(tmp_path))
    save_checkpoint(_state(3.0), step=3, directory=str(tmp_path))
    (tmp_path / "step-000000000003.json").write_text('{"step": 3, "fi')  # cut off
    os.unlink(tmp_path / json.loads((tmp_path / "step-000000000002.json").read_text())["file"])
    capsys.readouterr()
    assert load_checkpoint(directory=str(tmp_path))[1] == 1
    err = capsys.readouterr().err
    assert "skipping checkpoint" in err and "step-000000000003.json" in err
    assert "step-000000000002.json: its data file step-000000000002-" in err and "is missing" in err


def test_a_truncated_data_file_is_named_as_not_matching_its_manifest(tmp_path, capsys):
    save_checkpoint(_state(1.0), step=1, directory=str(tmp_path))
    location = save_checkpoint(_state(2.0), step=2, directory=str(tmp_path))
    with open(location, "r+b") as f:
        f.truncate(10)
    capsys.readouterr()
    assert load_checkpoint(directory=str(tmp_path))[1] == 1
    assert "do not match the manifest's" in capsys.readouterr().err


def test_old_checkpoints_and_leftovers_are_pruned_to_keep(tmp_path):
    leftover = tmp_path / ".step-000000000000-0123456789ab.pt.tmp-0123456789ab"
    tmp_path.mkdir(exist_ok=True)
    leftover.write_bytes(b"partial")
    orphan = tmp_path / "step-000000000000-0123456789ab.pt"
    orphan.write_bytes(b"no manifest")
    for step in range(1, 6):
        save_checkpoint(_state(float(step)), step=step, keep=2, directory=str(tmp_path))
    assert [f for f in _files(tmp_path) if f.endswith(".json")] == ["step-000000000004.json", "step-000000000005.json"]
    assert len(_files(tmp_path)) == 4 and not leftover.exists() and not orphan.exists()
    # saving a step again replaces it: its old data file goes, the loaded state is the new one
    save_checkpoint(_state(50.0), step=5, keep=2, directory=str(tmp_path))
    assert len(_files(tmp_path)) == 4
    state, step = load_checkpoint(directory=str(tmp_path))
    assert step == 5 and float(state["model"]["w"][0]) == 50.0


@pytest.mark.parametrize("variable", ["HOROVOD_RANK", "RANK"])
def test_only_rank_zero_saves(tmp_path, monkeypatch, variable):
    save_checkpoint(_state(1.0), step=1, directory=str(tmp_path))
    monkeypatch.setenv(variable, "1")
    assert save_checkpoint(_state(2.0), step=2, directory=str(tmp_path)) is None
    assert [f for f in _files(tmp_path) if f.endswith(".json")] == ["step-000000000001.json"]
    assert load_checkpoint(directory=str(tmp_path))[1] == 1  # every rank loads


def test_once_asked_to_stop_rank_zero_stops_right_after_saving_and_other_ranks_go_on(tmp_path, monkeypatch, capsys):
    ckpt, flag = tmp_path / "ckpt", tmp_path / "rank-0" / "stop"
    monkeypatch.setenv(ENV_STOP_FLAG, str(flag))  # a barrier rank: its task creates the file when the driver asks
    flag.parent.mkdir()
    save_checkpoint(_state(1.0), step=5, directory=str(ckpt))  # not told yet: goes on
    flag.write_text("all np=2 task slots are free again")  # what the task writes when the driver asks
    with pytest.raises(StopAtCheckpoint, match=r"^stopped after saving checkpoint step 10: all np=2 task") as stop:
        save_checkpoint(_state(2.0), step=10, directory=str(ckpt))
    assert not isinstance(stop.value, Exception)  # an `except Exception` in the training function lets it through
    state, step = load_checkpoint(directory=str(ckpt))
    assert (step, float(state["model"]["w"][0])) == (10, 2.0)  # saved whole before it stopped
    out = capsys.readouterr().out
    assert "stopping after checkpoint step 10: all np=2 task slots are free again" in out, out
    monkeypatch.setenv("HOROVOD_RANK", "1")
    assert save_checkpoint(_state(3.0), step=15, directory=str(ckpt)) is None  # only rank 0 saves, so only it stops


def test_bad_arguments_are_refused_naming_them(tmp_path):
    for step in (-1, 1.5, True, "3"):
        with pytest.raises(ValueError, match=r"^step must be a non-negative int"):
            save_checkpoint({}, step=step, directory=str(tmp_path))
    for keep in (0, -2, True, 2.0):
        with pytest.raises(ValueError, match=r"^keep must be a positive int"):
            save_checkpoint({}, step=1, keep=keep, directory=str(tmp_path))
    assert not tmp_path.joinpath("step-000000000001.json").exists()


def test_the_directory_and_try_come_from_the_job_else_a_clear_error(tmp_path, monkeypatch, capsys):
    with pytest.raises(RuntimeError, match=r"checkpoint_dir\(\) has no directory: HOROVOD_AIRFLOW_CHECKPOINT_DIR"):
        checkpoint_dir()
    with pytest.raises(RuntimeError, match=r"checkpoint_dir\(\) has no directory"):
        save_checkpoint({}, step=1)
    assert try_number() is None
    monkeypatch.setenv(CHECKPOINT_DIR_ENV, str(tmp_path / "ckpt"))
    monkeypatch.setenv(TRY_NUMBER_ENV, "1")
    assert checkpoint_dir() == str(tmp_path / "ckpt") and (tmp_path / "ckpt").is_dir()
    assert load_checkpoint() is None
    assert "no checkpoint in" in capsys.readouterr().out
    save_checkpoint(_state(1.0), step=7)
    monkeypatch.setenv(TRY_NUMBER_ENV, "2")
    assert try_number() == 2
    assert load_checkpoint()[1] == 7
    assert "resuming from checkpoint step 7 (try 2), saved by try 1" in capsys.readouterr().out


def test_weights_only_refuses_arbitrary_objects_unless_asked(tmp_path):
    save_checkpoint({"rng": os.stat_result((0,) * 10)}, step=1, directory=str(tmp_path))
    with pytest.raises(Exception, match="Weights only load failed|weights_only"):
        load_checkpoint(directory=str(tmp_path))
    state, _ = load_checkpoint(weights_only=False, directory=str(tmp_path))
    assert isinstance(state["rng"], os.stat_result)


def test_checkpoints_on_object_storage(s3_server, monkeypatch, capsys):  # noqa: F811
    for name, value in s3_server.env.items():
        monkeypatch.setenv(name, value)
    fs = s3_server.fs()
    fs.mkdir("ckpt")
    where = "s3://ckpt/dag/run/train/checkpoints"
    monkeypatch.setenv(CHECKPOINT_DIR_ENV, where)
    assert load_checkpoint() is None
    for step in (10, 20, 30):
        save_checkpoint(_state(float(step)), step=step, keep=2)
    names = sorted(p.rsplit("/", 1)[-1] for p in fs.ls("ckpt/dag/run/train/checkpoints", refresh=True))
    assert [n for n in names if n.endswith(".json")] == ["step-000000000020.json", "step-000000000030.json"]
    assert len(names) == 4
    # a newer checkpoint whose manifest never got written (the PUT of its data done, the job killed): not loaded
    fs.pipe_file("ckpt/dag/run/train/checkpoints/step-000000000040-0123456789ab.pt", b"\x80 a data object")
    state, step = load_checkpoint()
    assert step == 30 and float(state["model"]["w"][0]) == 30.0
    assert f"resuming from checkpoint step 30, from {where}/step-000000000030.json" in capsys.readouterr().out
    # the next save prunes the orphan
    save_checkpoint(_state(50.0), step=50, keep=2)
    names = sorted(p.rsplit("/", 1)[-1] for p in fs.ls("ckpt/dag/run/train/checkpoints", refresh=True))
    assert len(names) == 4 and not any(n.startswith("step-000000000040") for n in names)
