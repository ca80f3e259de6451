"""Every standalone driver state maps explicitly to reattach, done, or resubmit; KILLED and ERROR are never success."""

from __future__ import annotations

import pytest

from airflow_provider_horovod.exceptions import HorovodJobError
from airflow_provider_horovod.operators._durable import NOT_FOUND, DurableClusterJob, cluster_job

JOB = DurableClusterJob()


@pytest.mark.parametrize(("state", "active", "succeeded"), [
    ("SUBMITTED", True, False), ("RUNNING", True, False), ("RELAUNCHING", True, False), ("UNKNOWN", True, False),
    ("FINISHED", False, True), ("FAILED", False, False), ("KILLED", False, False), ("ERROR", False, False),
    (NOT_FOUND, False, False),
])
def test_each_driver_state_has_one_meaning(state, active, succeeded):
    assert (JOB.is_job_active(state), JOB.is_job_succeeded(state)) == (active, succeeded)


def test_the_persisted_record_is_checked():
    record = {"submission_id": "driver-1", "staging": "/shared/s", "artifact_dir": "/shared/a", "extra": 1}
    assert cluster_job(record) == {"submission_id": "driver-1", "staging": "/shared/s", "artifact_dir": "/shared/a"}
    with pytest.raises(HorovodJobError, match="unexpected cluster job record"):
        cluster_job("driver-1")
