"""The deferral trigger's contract: serialize round trip, argument and event validation."""

from __future__ import annotations

import pytest

from airflow_provider_horovod.triggers.horovod import EVENT_KEYS, HorovodSparkJobTrigger, validate_event


def test_serialize_round_trip():
    trigger = HorovodSparkJobTrigger(submission_id="driver-20261130-0001", rest_url="http://m:6066",
                                     staging="/shared/.staging/d/r/t/try-1", poll_interval_s=2.5,
                                     cancel_on_kill=False, timeout_s=7)
    path, kwargs = trigger.serialize()
    assert path == "airflow_provider_horovod.triggers.horovod.HorovodSparkJobTrigger"
    assert kwargs == {"submission_id": "driver-20261130-0001", "rest_url": "http://m:6066",
                      "staging": "/shared/.staging/d/r/t/try-1", "poll_interval_s": 2.5, "cancel_on_kill": False,
                      "timeout_s": 7}
    assert HorovodSparkJobTrigger(**kwargs).serialize() == (path, kwargs)


def test_poll_interval_must_be_positive():
    with pytest.raises(ValueError, match="poll_interval_s must be > 0 seconds"):
        HorovodSparkJobTrigger(submission_id="d", rest_url="http://m:6066", staging="/s", poll_interval_s=0)


def test_event_validation():
    event = {k: None for k in EVENT_KEYS} | {"status": "success", "submission_id": "driver-1", "staging": "/s"}
    assert validate_event(event) is event
    with pytest.raises(ValueError, match="expected the keys"):
        validate_event({"status": "success"})
    with pytest.raises(ValueError, match="expected 'success' or 'failed'"):
        validate_event(event | {"status": "running"})
