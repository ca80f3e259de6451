"""Reading back the driver's result: a kill from outside is said first, the dying driver's error after it."""

from __future__ import annotations

import json

import pytest

from airflow_provider_horovod.exceptions import HorovodJobError
from airflow_provider_horovod.utils.job_result import read_job_result

KILLED = "Spark driver driver-1 (application app-1) was KILLED from outside this task"
DYING = "Py4JNetworkError: Answer from Java side is empty"


def _write(tmp_path, **outcome):
    (tmp_path / "result.json").write_text(json.dumps({"status": "failed", "app_id": "app-1", "ui_url": None,
                                                      "artifact_paths": [], "error": None, "message": None,
                                                      **outcome}))


def test_the_kill_comes_first_and_the_driver_s_error_follows_as_its_consequence(tmp_path):
    _write(tmp_path, message=DYING, error={"rank": 1, "exc_type": "RuntimeError"},
           artifact_paths=[str(tmp_path / "model.pt")])
    with pytest.raises(HorovodJobError) as raised:
        read_job_result(tmp_path, headline=KILLED)
    lines = str(raised.value).splitlines()
    assert lines[0] == KILLED
    assert lines[1] == f"The driver's last error, a consequence of the kill: {DYING}"
    assert lines[2].endswith("model.pt")
    assert raised.value.rank is None  # no rank is blamed for a kill
    assert raised.value.app_id == "app-1"


def test_a_driver_killed_before_it_wrote_a_result_says_so(tmp_path):
    with pytest.raises(HorovodJobError) as raised:
        read_job_result(tmp_path, headline=KILLED, submit_error=RuntimeError("driver state KILLED: no message"))
    assert str(raised.value) == f"{KILLED}; the Spark driver ended before running the job (no result was written)"


def test_without_a_kill_the_driver_s_account_stands(tmp_path):
    _write(tmp_path, message="Horovod rank 1 failed", error={"rank": 1, "exc_type": "RuntimeError"})
    with pytest.raises(HorovodJobError) as raised:
        read_job_result(tmp_path)
    assert str(raised.value) == "Horovod rank 1 failed" and raised.value.rank == 1


def test_a_lost_executor_reaches_airflow_as_its_own_type_with_the_facts(tmp_path):
    from airflow_provider_horovod.exceptions import HorovodExecutorLostError

    facts = {"executor": "1", "host": "10.0.0.7", "rank": 1, "partition": 1,
             "reason": "Command exited with code 137", "exit_code": 137}
    _write(tmp_path, message="Spark lost executor 1 on 10.0.0.7", kind="ExecutorLostError",
           facts=facts)
    with pytest.raises(HorovodExecutorLostError) as raised:
        read_job_result(tmp_path)
    assert isinstance(raised.value, HorovodJobError)  # what caught it before still does
    assert raised.value.facts == facts and raised.value.executor == "1" and raised.value.rank == 1
    assert str(raised.value) == "Spark lost executor 1 on 10.0.0.7"
    # a kill from outside is the cause, whatever the dying driver saw
    with pytest.raises(HorovodJobError) as raised:
        read_job_result(tmp_path, headline=KILLED)
    assert type(raised.value) is HorovodJobError
