"""
Which failures restart a job in the driver (max_restarts, restart_on), the budget, the back-off, the account given;
and what a restarted attempt's ranks are told. The restarts themselves run in tests/integration/test_restarts.py.
"""

from __future__ import annotations

import dataclasses
import itertools

import pytest

from airflow_provider_horovod.runtime.driver.restarts import (
    MAX_BACKOFF_S,
    RestartBudget,
    backoff_s,
    restart_cause,
    restarted,
)
from airflow_provider_horovod.runtime.errors import ExecutorLostError, JobCancelledError, LaunchError
from airflow_provider_horovod.runtime.rank_errors import (
    STOPPED_AT_CHECKPOINT,
    WAITING_FOR_PEERS,
    rank_failed,
    root_cause,
)
from airflow_provider_horovod.runtime.settings import JobSettings
from airflow_provider_horovod.runtime.task.rank_env import RankPipes, worker_environ
from airflow_provider_horovod.runtime.wire.jobspec import JobSpec
from airflow_provider_horovod.runtime.wire.progress_format import restarts_summary

LOST = ExecutorLostError("lost", executor="1", host="127.0.0.1", rank=1, reason="Command exited with code 137")
KILLED = rank_failed(rank=1, exit_code=-9)
NEVER_JOINED = rank_failed(rank=0, exit_code=1, exc_type=WAITING_FOR_PEERS)
USER_BUG = rank_failed(rank=1, exit_code=1, exc_type="ValueError", exc_message="corrupt shard")
OOM = rank_failed(rank=0, exit_code=1, exc_type="torch.OutOfMemoryError", exc_message="CUDA out of memory")


@pytest.mark.parametrize(
    ("err", "restart_on", "cause"),
    [
        (LOST, (), "executor 1 on 127.0.0.1 lost (Command exited with code 137), holding rank 1"),
        (KILLED, (), "rank 1 killed by SIGKILL"),
        (NEVER_JOINED, (), f"rank 0 never joined ({WAITING_FOR_PEERS})"),
        (USER_BUG, (), None),  # the code's own bug would fail again
        (USER_BUG, ("KeyError",), None),
        (USER_BUG, ("ValueError",), "rank 1 raised ValueError: corrupt shard"),
        (USER_BUG, ("*",), "rank 1 raised ValueError: corrupt shard"),
        (OOM, ("OutOfMemoryError",), "rank 0 raised torch.OutOfMemoryError: CUDA out of memory"),  # a bare name
        (OOM, ("torch.OutOfMemoryError",), "rank 0 raised torch.OutOfMemoryError: CUDA out of memory"),
        (JobCancelledError("killed from the UI"), ("*",), None),  # somebody stopped it on purpose
        (LaunchError("not enough slots"), ("*",), None),
        (ValueError("bad input"), ("*",), None),
    ],
)
def test_what_restarts(err, restart_on, cause):
    assert restart_cause(err, restart_on) == cause


def test_the_first_restart_is_at_once_then_the_back_off_doubles_from_a_second_up_to_its_bound():
    assert [backoff_s(n) for n in (1, 2, 3, 4, 5)] == [0.0, 1.0, 2.0, 4.0, 8.0]
    assert backoff_s(40) == MAX_BACKOFF_S


def test_the_budget_counts_restarts_and_stops_at_max_restarts():
    clock = itertools.count(100.0)
    budget = RestartBudget(2, clock=lambda: next(clock))
    assert budget.count == 0 and budget.next_restart(USER_BUG) is None and budget.count == 0
    first = budget.next_restart(KILLED)
    second = budget.next_restart(LOST)
    assert (first.number, first.backoff_s, first.at, second.number, second.backoff_s) == (1, 0.0, 100.0, 2, 1.0)
    assert first.line() == "restart 1/2: rank 1 killed by SIGKILL; starting again now"
    assert second.line() == (
        "restart 2/2: executor 1 on 127.0.0.1 lost (Command exited with code 137), holding rank 1; "
        "starting again in 1 s"
    )
    assert budget.next_restart(KILLED) is None and budget.count == 2  # spent
    assert RestartBudget(0).next_restart(LOST) is None


def test_the_failure_that_ends_a_restarted_job_names_every_restart():
    budget = RestartBudget(2)
    budget.next_restart(KILLED)
    budget.next_restart(LOST)
    err = restarted(rank_failed(rank=1, exit_code=-9), budget.restarts, 2)
    note = "\n".join(err.__notes__)
    assert note.startswith("the job was restarted 2 time(s) of max_restarts=2 before this failure:")
    assert "restart 1: rank 1 killed by SIGKILL" in note and "restart 2: executor 1 on 127.0.0.1 lost" in note
    assert [r["cause"] for r in err.restarts] == [budget.restarts[0].cause, budget.restarts[1].cause]
    untouched = restarted(ValueError("x"), [], 3)
    assert not getattr(untouched, "__notes__", None) and untouched.restarts == []


@pytest.mark.parametrize(("launcher", "torchelastic"), [("torch", True), ("horovod", False)])
def test_a_restarted_attempt_s_ranks_are_told_its_restart_count(launcher, torchelastic, tmp_path):
    settings = JobSettings(np=2, launcher=launcher, max_restarts=3)
    spec = JobSpec(payload=b"", settings=settings, restart_count=2, failures=2)
    env = worker_environ(
        spec, launch_env={}, devices={}, rank_dir=str(tmp_path), pipes=RankPipes(lifeline=3, progress=4)
    )
    assert env["HOROVOD_AIRFLOW_RESTART_COUNT"] == "2"
    expected = {"TORCHELASTIC_RESTART_COUNT": "2", "TORCHELASTIC_MAX_RESTARTS": "3"} if torchelastic else {}
    assert {k: v for k, v in env.items() if k.startswith("TORCHELASTIC_") and "RESTART" in k} == expected
    assert "HOROVOD_AIRFLOW_STOP_FLAG" not in env  # an attempt the driver will not ask to stop
    barrier = worker_environ(
        dataclasses.replace(spec, stoppable=True), launch_env={}, devices={}, rank_dir=str(tmp_path),
        pipes=RankPipes(lifeline=3, progress=4),
    )  # fmt: skip
    assert barrier["HOROVOD_AIRFLOW_STOP_FLAG"] == str(tmp_path / "stop")
    grown = worker_environ(
        dataclasses.replace(spec, restart_count=3, failures=2), launch_env={}, devices={}, rank_dir=str(tmp_path),
        pipes=RankPipes(lifeline=3, progress=4),
    )  # fmt: skip
    assert grown["HOROVOD_AIRFLOW_RESTART_COUNT"] == "3"  # restart_count(): every restart, growing back included
    if torchelastic:  # torchrun's agent counts no membership change: only the restarts after a failure
        assert grown["TORCHELASTIC_RESTART_COUNT"] == "2"


STOPPED = rank_failed(
    rank=0,
    exit_code=1,
    exc_type=STOPPED_AT_CHECKPOINT,
    exc_message="stopped after saving checkpoint step 20: all np=2 task slots are free again",
)


def test_a_planned_restart_comes_at_once_without_using_max_restarts():
    budget = RestartBudget(max_restarts=1, clock=itertools.count(100).__next__)
    lost = budget.next_restart(LOST, step=17, ranks=4)
    planned = budget.next_restart(STOPPED, step=20, ranks=3)
    assert lost is not None and planned is not None
    assert (planned.number, planned.planned, planned.backoff_s, planned.ranks, lost.ranks) == (2, True, 0.0, 3, 4)
    assert planned.cause == "rank 0 stopped after saving checkpoint step 20: all np=2 task slots are free again"
    assert planned.line() == (
        "restart 2 (planned; not counted in max_restarts=1): rank 0 stopped after saving checkpoint step 20: all np=2 "
        "task slots are free again; starting again now"
    )
    assert budget.count == 2 and budget.failures == 1  # the next attempt is restart_count 2; one failure spent
    assert budget.next_restart(KILLED) is None  # max_restarts=1 is spent by the lost executor alone
    note = "\n".join(restarted(KILLED, budget.restarts, 1).__notes__)
    assert (
        "restarted 1 time(s) of max_restarts=1 and 1 time(s) at a checkpoint the driver asked for before this failure"
    ) in note, note


def test_a_failure_after_a_planned_restart_backs_off_and_is_named_by_its_place_in_the_budget():
    budget = RestartBudget(max_restarts=2)
    budget.next_restart(LOST)
    assert budget.next_restart(STOPPED).planned  # type: ignore[union-attr]
    second = budget.next_restart(KILLED, step=30)
    assert second is not None and (second.number, second.failure, second.backoff_s) == (3, 2, backoff_s(2))
    assert (
        second.line() == "restart 3 (2/2 of max_restarts): rank 1 killed by SIGKILL at step 30; starting again in 1 s"
    )
    assert restart_cause(STOPPED) is not None and not restart_cause(USER_BUG)  # a planned stop is no user bug


def test_the_stop_at_a_checkpoint_is_the_attempt_s_account_whatever_the_other_ranks_raised():
    """Rank 0 stops first, the others fail in their next collective: whatever their errors say (a Gloo error no
    pattern knows, an earlier clock), the stop is the root cause, so the job starts again instead of failing."""
    stranger = rank_failed(rank=1, exit_code=1, exc_type="RuntimeError", exc_message="Broken pipe", failed_at=1.0)
    message = "stopped after saving checkpoint step 20: executor 3 on 10.0.0.7 is being decommissioned"
    stop = rank_failed(
        rank=0, exit_code=1, exc_type=STOPPED_AT_CHECKPOINT, exc_message=message, failed_at=2.0, host="10.0.0.7"
    )
    assert root_cause([stranger, stop]) is stop
    assert stop.headline() == f"Horovod rank 0 on 10.0.0.7 {message}"


def test_the_end_of_job_summary_tells_a_planned_restart_apart():
    lost = {"number": 1, "of": 1, "cause": "executor 1 on 127.0.0.1 lost", "step": 14, "planned": False}
    planned = {"number": 2, "of": 1, "cause": "rank 0 stopped after saving checkpoint step 15: all np=2 task slots "
               "are free again", "step": 15, "planned": True}  # fmt: skip
    assert restarts_summary([lost]) == "1 time(s) (max_restarts): executor 1 on 127.0.0.1 lost at step 14"
    assert restarts_summary([lost, planned]) == (
        "2 time(s) (1 after a failure, of max_restarts; 1 planned): executor 1 on 127.0.0.1 lost at step 14; "
        "rank 0 stopped after saving checkpoint step 15: all np=2 task slots are free again"
    )  # a planned restart names its checkpoint, not the step again
