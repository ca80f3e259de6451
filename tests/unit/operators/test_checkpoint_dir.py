"""The checkpoint directory a task instance's tries get: the same for every try, another for every run and map index,
carried with the try number to the driver program's flags (what the ranks' checkpoint_dir() and try_number() read)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from airflow_provider_horovod.hooks import horovod as client
from airflow_provider_horovod.operators.horovod import HorovodRunnerOperator
from airflow_provider_horovod.paths import default_artifact_dir, default_checkpoint_dir
from airflow_provider_horovod.runtime import HorovodRunner
from airflow_provider_horovod.runtime.driver.program import _parse, _settings
from airflow_provider_horovod.runtime.settings import JobSettings

RUN = "manual__2026-01-01T00:00:00+00:00"


def train():
    return 1


def _ti(**changes):
    pushed: dict = {}
    values = {
        "dag_id": "d",
        "run_id": RUN,
        "task_id": "train",
        "try_number": 1,
        "map_index": -1,
        "xcom_push": lambda key, value: pushed.__setitem__(key, value),
        "pushed": pushed,
    }
    return SimpleNamespace(**{**values, **changes})


def test_every_try_of_a_task_instance_gets_one_directory_and_nothing_else_shares_it(monkeypatch, tmp_path):
    monkeypatch.setenv("AIRFLOW__HOROVOD__ARTIFACT_ROOT", str(tmp_path))
    first = default_checkpoint_dir({"ti": _ti()})
    assert first == str(tmp_path / "d" / "manual__2026-01-01T00~3A00~3A00~2B00~3A00" / "train" / "checkpoints")
    assert default_checkpoint_dir({"ti": _ti(try_number=2)}) == first
    assert default_artifact_dir({"ti": _ti(try_number=2)}) != default_artifact_dir({"ti": _ti()})
    others = {
        default_checkpoint_dir({"ti": _ti(**c)})
        for c in (
            {"run_id": "scheduled__2026-01-02T00:00:00+00:00"},
            {"map_index": 0},
            {"map_index": 1},
            {"task_id": "other"},
            {"dag_id": "e"},
        )
    }
    assert len(others) == 5 and first not in others
    assert default_checkpoint_dir({"ti": _ti(map_index=1, try_number=3)}).endswith("/train/map-1/checkpoints")
    monkeypatch.setenv("AIRFLOW__HOROVOD__ARTIFACT_ROOT", "s3://bucket/root/")
    assert (
        default_checkpoint_dir({"ti": _ti()})
        == "s3://bucket/root/d/manual__2026-01-01T00~3A00~3A00~2B00~3A00/train/checkpoints"
    )


class _Submitted(Exception):
    pass


def _submitted_settings(op, ti, monkeypatch) -> JobSettings:
    """Run ``op.execute`` up to spark-submit (client mode) and read the driver program's settings off its command."""
    seen: list[list[str]] = []

    def submit(self, application, **kwargs):
        seen.append(self._build_spark_submit_command(application))
        raise _Submitted

    monkeypatch.setattr(client._SparkSubmit, "submit", submit)
    with pytest.raises(_Submitted):
        op.execute({"ti": ti})
    [command] = seen
    return _settings(_parse(command[command.index("--payload") :])[1])


def test_the_operator_hands_both_tries_the_same_directory_and_each_its_number(monkeypatch, tmp_path):
    monkeypatch.setenv("AIRFLOW__HOROVOD__ARTIFACT_ROOT", str(tmp_path))
    op = HorovodRunnerOperator(task_id="train", python_callable=train, np=2, conn_id=None)
    first, second = _ti(), _ti(try_number=2)
    one = _submitted_settings(op, first, monkeypatch)
    two = _submitted_settings(op, second, monkeypatch)
    expected = default_checkpoint_dir({"ti": first})
    assert (one.checkpoint_dir, one.try_number) == (expected, 1)
    assert (two.checkpoint_dir, two.try_number) == (expected, 2)
    assert first.pushed["checkpoint_dir"] == second.pushed["checkpoint_dir"] == expected
    assert first.pushed["artifact_dir"].endswith("try-1") and second.pushed["artifact_dir"].endswith("try-2")
    mapped = _submitted_settings(op, _ti(map_index=4), monkeypatch)
    assert mapped.checkpoint_dir.endswith("/train/map-4/checkpoints")


def test_a_given_checkpoint_dir_is_rendered_and_may_name_the_artifact_dir_s_connection(monkeypatch, tmp_path):
    monkeypatch.setenv("AIRFLOW__HOROVOD__ARTIFACT_ROOT", str(tmp_path))
    monkeypatch.setenv("AIRFLOW_CONN_STORE", json.dumps({"conn_type": "aws", "login": "AKID", "password": "s3cr3t"}))
    monkeypatch.setenv("AIRFLOW_CONN_OTHER", json.dumps({"conn_type": "aws", "login": "AKID2", "password": "x"}))
    assert "checkpoint_dir" in HorovodRunnerOperator.template_fields
    op = HorovodRunnerOperator(
        task_id="train", python_callable=train, np=2, conn_id=None, checkpoint_dir="s3://store@bucket/ckpt/train"
    )
    settings = _submitted_settings(op, _ti(), monkeypatch)
    assert settings.checkpoint_dir == "s3://bucket/ckpt/train"  # no connection id for the ranks
    assert op.training_job({"ti": _ti()}).env["AWS_ACCESS_KEY_ID"] == "AKID"  # its credentials travel as env_vars do
    op = HorovodRunnerOperator(
        task_id="train",
        python_callable=train,
        np=2,
        conn_id=None,
        artifact_dir="s3://other@bucket/art",
        checkpoint_dir="s3://store@bucket/ckpt",
    )
    with pytest.raises(
        ValueError,
        match=r"artifact_dir names connection 'other' and checkpoint_dir names "
        r"connection 'store'",
    ):
        op.execute({"ti": _ti()})


def test_the_runner_takes_them_as_arguments_and_the_driver_flags_carry_them():
    runner = HorovodRunner(np=2, checkpoint_dir="/shared/ckpt", try_number=3)
    assert (runner.settings.checkpoint_dir, runner.settings.try_number) == ("/shared/ckpt", 3)
    for settings in (runner.settings, JobSettings(np=2), JobSettings(np=2, checkpoint_dir="none")):
        assert _settings(settings.to_args()) == settings
    assert "--checkpoint-dir" not in JobSettings(np=2).to_args()
    for bad in ("", "  ", 3):
        with pytest.raises(ValueError, match=r"^checkpoint_dir must be a path or URI"):
            HorovodRunner(np=2, checkpoint_dir=bad)
    for bad in (0, -1, True, "2"):
        with pytest.raises(ValueError, match=r"^try_number must be a positive int"):
            JobSettings(np=2, try_number=bad)
