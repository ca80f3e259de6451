"""Every standalone driver state maps explicitly to reattach, done, or resubmit; KILLED and ERROR are never success."""

from __future__ import annotations

import pytest

from airflow_provider_horovod.exceptions import HorovodJobError
from airflow_provider_horovod.standalone.durable import (
    NOT_FOUND,
    DurableClusterJob,
    abandoned_by,
    cluster_job,
    job_record,
)

JOB = DurableClusterJob()


@pytest.mark.parametrize(
    ("state", "active", "succeeded"),
    [
        ("SUBMITTED", True, False),
        ("RUNNING", True, False),
        ("RELAUNCHING", True, False),
        ("UNKNOWN", True, False),
        ("FINISHED", False, True),
        ("FAILED", False, False),
        ("KILLED", False, False),
        ("ERROR", False, False),
        (NOT_FOUND, False, False),
    ],
)
def test_each_driver_state_has_one_meaning(state, active, succeeded):
    assert (JOB.is_job_active(state), JOB.is_job_succeeded(state)) == (active, succeeded)


def test_the_persisted_record_is_checked():
    record = {"submission_id": "driver-1", "staging": "/shared/s", "artifact_dir": "/shared/a", "extra": 1}
    assert cluster_job(record) == {"submission_id": "driver-1", "staging": "/shared/s", "artifact_dir": "/shared/a"}
    with pytest.raises(HorovodJobError, match="unexpected cluster job record"):
        cluster_job("driver-1")


RECORD = job_record(
    submission_id="driver-1",
    staging="/shared/s/try-1",
    artifact_dir="/shared/a/try-1",
    try_number=1,
    deferred=True,
    cancel_on_kill=True,
)


def test_the_record_names_the_try_that_submitted_and_how_it_waits():
    assert cluster_job(RECORD) == {
        "submission_id": "driver-1",
        "staging": "/shared/s/try-1",
        "artifact_dir": "/shared/a/try-1",
    }
    assert (RECORD["try_number"], RECORD["deferred"], RECORD["cancel_on_kill"]) == (1, True, True)


def test_an_active_driver_handed_to_the_trigger_by_an_earlier_try_is_not_adopted():
    # cleared, marked failed or its trigger failed: the trigger's on_kill is killing that driver
    assert "try 1 handed it to the trigger" in abandoned_by(RECORD, current_try=2, kill_recorded=False)


def test_a_recorded_kill_is_never_adopted():
    sync = {**RECORD, "deferred": False}
    assert "was killed" in abandoned_by(sync, current_try=2, kill_recorded=True)


@pytest.mark.parametrize(
    "record",
    [
        {**RECORD, "deferred": False},  # a sync try whose process died without on_kill: a worker crash
        {**RECORD, "cancel_on_kill": False},  # nobody kills that driver
        {"submission_id": "driver-1", "staging": "/s", "artifact_dir": "/a"},  # persisted before the fields existed
    ],
)
def test_a_crashed_try_s_driver_is_adopted(record):
    assert abandoned_by(record, current_try=2, kill_recorded=False) is None


def test_the_same_try_reading_its_own_record_adopts_it():
    assert abandoned_by(RECORD, current_try=1, kill_recorded=False) is None


def test_the_record_s_key_and_fields_are_those_earlier_releases_persisted():
    """Users' task state stores hold records under this key with these fields: a retry in flight reads them."""
    from airflow_provider_horovod.operators.horovod import HorovodRunnerOperator

    assert HorovodRunnerOperator.external_id_key == DurableClusterJob.external_id_key == "horovod_cluster_job"
    assert RECORD == {
        "submission_id": "driver-1",
        "staging": "/shared/s/try-1",
        "artifact_dir": "/shared/a/try-1",
        "try_number": 1,
        "deferred": True,
        "cancel_on_kill": True,
    }
