"""Reading back the driver's result: a kill from outside is said first, the dying driver's error after it."""

from __future__ import annotations

import json

import pytest

from airflow_provider_horovod.exceptions import HorovodJobError, HorovodJobKilledError
from airflow_provider_horovod.utils.job_result import Kill, read_job_result

KILLED = "Spark driver driver-1 (application app-1) was KILLED from outside this task"
KILL = Kill(KILLED, {"submission_id": "driver-1", "driver_state": "KILLED", "app_id": "app-1", "by": "outside"})
DYING = "Py4JNetworkError: Answer from Java side is empty"


def _write(tmp_path, **outcome):
    (tmp_path / "result.json").write_text(
        json.dumps(
            {
                "status": "failed",
                "app_id": "app-1",
                "ui_url": None,
                "artifact_paths": [],
                "error": None,
                "message": None,
                **outcome,
            }
        )
    )


def test_the_kill_comes_first_and_the_driver_s_error_follows_as_its_consequence(tmp_path):
    _write(
        tmp_path,
        message=DYING,
        error={"rank": 1, "exc_type": "RuntimeError"},
        artifact_paths=[str(tmp_path / "model.pt")],
    )
    with pytest.raises(HorovodJobKilledError) as raised:
        read_job_result(tmp_path, killed=KILL)
    assert raised.value.facts == KILL.facts
    lines = str(raised.value).splitlines()
    assert lines[0] == KILLED
    assert lines[1] == f"The driver's last error, a consequence of the kill: {DYING}"
    assert lines[2].endswith("model.pt")
    assert raised.value.rank is None  # no rank is blamed for a kill
    assert raised.value.app_id == "app-1"


def test_a_driver_killed_before_it_wrote_a_result_says_so(tmp_path):
    with pytest.raises(HorovodJobKilledError) as raised:
        read_job_result(tmp_path, killed=KILL, submit_error=RuntimeError("driver state KILLED: no message"))
    assert str(raised.value) == f"{KILLED}; the Spark driver ended before running the job (no result was written)"


def test_without_a_kill_the_driver_s_account_stands(tmp_path):
    _write(tmp_path, message="Horovod rank 1 failed", error={"rank": 1, "exc_type": "RuntimeError"})
    with pytest.raises(HorovodJobError) as raised:
        read_job_result(tmp_path)
    assert str(raised.value) == "Horovod rank 1 failed" and raised.value.rank == 1


def test_a_lost_executor_reaches_airflow_as_its_own_type_with_the_facts(tmp_path):
    from airflow_provider_horovod.exceptions import HorovodExecutorLostError

    facts = {
        "executor": "1",
        "host": "10.0.0.7",
        "rank": 1,
        "partition": 1,
        "reason": "Command exited with code 137",
        "exit_code": 137,
    }
    _write(tmp_path, message="Spark lost executor 1 on 10.0.0.7", kind="ExecutorLostError", facts=facts)
    with pytest.raises(HorovodExecutorLostError) as raised:
        read_job_result(tmp_path)
    assert isinstance(raised.value, HorovodJobError)  # what caught it before still does
    assert raised.value.facts == facts and raised.value.executor == "1" and raised.value.rank == 1
    assert str(raised.value) == "Spark lost executor 1 on 10.0.0.7"
    # a kill from outside is the cause, whatever the dying driver saw
    with pytest.raises(HorovodJobError) as raised:
        read_job_result(tmp_path, killed=KILL)
    assert type(raised.value) is HorovodJobKilledError


def test_a_job_cancelled_on_the_driver_reaches_airflow_as_a_kill_with_spark_s_reason(tmp_path):
    facts = {"job_id": 3, "reason": "because killed via Web UI"}
    _write(
        tmp_path,
        message="Spark cancelled the barrier job (job 3) from outside this run",
        kind="JobCancelledError",
        facts=facts,
        error=None,
    )
    with pytest.raises(HorovodJobKilledError) as raised:
        read_job_result(tmp_path)
    assert raised.value.facts == facts and raised.value.rank is None and raised.value.app_id == "app-1"


def test_a_rank_failure_reaches_airflow_as_its_kind():
    from airflow_provider_horovod.exceptions import HorovodRankKilledError, HorovodRendezvousError
    from airflow_provider_horovod.runtime.rank_errors import START_TIMEOUT, RankFailedError
    from airflow_provider_horovod.utils.job_result import rank_job_error

    killed = RankFailedError(rank=1, exit_code=-9).to_dict()
    err = rank_job_error("Horovod rank 1 failed (killed by signal SIGKILL)", killed, app_id="app-1")
    assert type(err) is HorovodRankKilledError and err.signal == 9 and err.rank == 1 and err.app_id == "app-1"
    never_joined = RankFailedError(rank=0, exit_code=-15, exc_type=START_TIMEOUT, exc_message="m").to_dict()
    assert type(rank_job_error("m", never_joined)) is HorovodRendezvousError
    raised = RankFailedError(rank=0, exit_code=1, exc_type="ValueError", exc_message="boom").to_dict()
    assert type(rank_job_error("m", raised)) is HorovodJobError
    assert type(rank_job_error("m", None)) is HorovodJobError


def test_read_job_result_raises_the_rank_failure_s_kind(tmp_path):
    from airflow_provider_horovod.exceptions import HorovodRankKilledError
    from airflow_provider_horovod.runtime.rank_errors import RankFailedError

    _write(
        tmp_path,
        message="Horovod rank 1 failed (killed by signal SIGKILL)",
        error=RankFailedError(rank=1, exit_code=-9).to_dict(),
    )
    with pytest.raises(HorovodRankKilledError) as raised:
        read_job_result(tmp_path)
    assert raised.value.rank == 1 and raised.value.signal == 9
