"""The limits a rank runs under and the errors they end in (runtime/task/rank_failure.py), as pure functions."""

from __future__ import annotations

import json

import pytest

from airflow_provider_horovod.runtime.rank_errors import PEER_LEFT, START_TIMEOUT, TRAINING_TIMEOUT, WAITING_FOR_PEERS
from airflow_provider_horovod.runtime.settings import JobSettings
from airflow_provider_horovod.runtime.task.rank_failure import (
    FAILURE_GRACE_S,
    exit_failure,
    next_deadline,
    timeout_failure,
)
from airflow_provider_horovod.runtime.wire.jobspec import JobSpec


def _spec(start: float | None = 30.0, training: float | None = 600.0) -> JobSpec:
    return JobSpec(payload=b"", settings=JobSettings(np=2, start_timeout_s=start, training_timeout_s=training))


@pytest.mark.parametrize(
    ("spec", "phase", "init_at", "expected"),
    [
        (_spec(), "starting", None, (130.0, "start")),  # start 100 + 30 before training's 100 + 600
        (_spec(start=None), "starting", None, (700.0, "training")),
        (_spec(), "running", None, (700.0, "training")),  # the function's own work before hvd.init() is not counted
        (_spec(), "init", 200.0, (200.0 + 30.0 + FAILURE_GRACE_S, "init")),
        (_spec(), "init", None, (700.0, "training")),
        (_spec(training=100.0), "init", 200.0, (200.0, "training")),  # whichever comes first
        (_spec(), "ready", 200.0, (700.0, "training")),
        (_spec(start=None, training=None), "starting", None, None),
    ],
)
def test_the_next_deadline_is_the_first_limit_that_applies_in_the_phase(spec, phase, init_at, expected):
    assert next_deadline(spec, phase, 100.0, init_at) == expected


@pytest.mark.parametrize(
    ("which", "kind", "says"),
    [
        ("training", TRAINING_TIMEOUT, "rank 1 was still running when training_timeout_s=600 ran out"),
        ("start", START_TIMEOUT, "rank 1 never reached hvd.init() within start_timeout_s=30"),
        ("init", WAITING_FOR_PEERS, "rank 1 was waiting in hvd.init() for the other ranks when start_timeout_s=30"),
        ("peer", PEER_LEFT, "rank 0 exited, so rank 1 waited for it in hvd.init() in vain"),
    ],
)
def test_a_timeout_names_the_rank_the_limit_and_its_value(which, kind, says):
    err = timeout_failure(
        which, rank=1, spec=_spec(), peer_left="rank 0 exited", exit_code=-9, host="h1", output_tail=["last line"]
    )
    assert (err.rank, err.exc_type, err.exit_code, err.host, err.output_tail) == (1, kind, -9, "h1", ["last line"])
    assert says in err.exc_message


def test_an_exit_failure_reads_the_error_file_or_falls_back_to_the_exit(tmp_path):
    path = tmp_path / "error.json"
    path.write_text(
        json.dumps({"exc_type": "ValueError", "exc_message": "bad lr", "traceback": "Traceback ...", "failed_at": 12.5})
    )
    err = exit_failure(rank=1, exit_code=1, error_path=str(path), host="h1", output_tail=["x"], exited_at=99.0)
    assert (err.exc_type, err.exc_message, err.traceback, err.failed_at) == (
        "ValueError",
        "bad lr",
        "Traceback ...",
        12.5,
    )
    died = exit_failure(
        rank=1, exit_code=-9, error_path=str(tmp_path / "none.json"), host="h1", output_tail=["x"], exited_at=99.0
    )
    assert (died.exc_type, died.exit_code, died.failed_at, died.output_tail) == (None, -9, 99.0, ["x"])
