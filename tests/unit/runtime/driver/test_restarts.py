"""
Which failures restart a job in the driver (max_restarts, restart_on), the budget, the back-off, the account given;
and what a restarted attempt's ranks are told. The restarts themselves run in tests/integration/test_restarts.py.
"""

from __future__ import annotations

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
from airflow_provider_horovod.runtime.rank_errors import WAITING_FOR_PEERS, rank_failed
from airflow_provider_horovod.runtime.settings import JobSettings
from airflow_provider_horovod.runtime.task.rank_env import RankPipes, worker_environ
from airflow_provider_horovod.runtime.wire.jobspec import JobSpec

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
    spec = JobSpec(payload=b"", settings=settings, restart_count=2)
    env = worker_environ(
        spec, launch_env={}, devices={}, rank_dir=str(tmp_path), pipes=RankPipes(lifeline=3, progress=4)
    )
    assert env["HOROVOD_AIRFLOW_RESTART_COUNT"] == "2"
    expected = {"TORCHELASTIC_RESTART_COUNT": "2", "TORCHELASTIC_MAX_RESTARTS": "3"} if torchelastic else {}
    assert {k: v for k, v in env.items() if k.startswith("TORCHELASTIC_") and "RESTART" in k} == expected
