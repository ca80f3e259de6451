"""
One poll of a cluster-mode driver, as both waits for it read it: the task's own loop
(:class:`~airflow_provider_horovod.operators.modes.cluster.ClusterMode`, blocking) and the deferral trigger
(:class:`~airflow_provider_horovod.triggers.horovod.HorovodSparkJobTrigger`, asyncio).
:meth:`~airflow_provider_horovod.hooks.standalone.HorovodStandaloneHook.read_poll` makes a :class:`DriverPoll` from
the master's answer and what the staging directory holds; the loops only read, log, sleep.

The trigger's event is :meth:`DriverPoll.event`; the operator checks it with :func:`validate_event` when it resumes.
Its keys (:data:`EVENT_KEYS`) are persisted with a deferred task: they never change.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["EVENT_KEYS", "FAILED", "RUNNING", "SUCCESS", "DriverPoll", "driver_failure", "validate_event"]

RUNNING, SUCCESS, FAILED = "running", "success", "failed"
"""A poll's outcome: the driver goes on, ended FINISHED, or ended otherwise (or its state could not be read)."""

EVENT_KEYS = frozenset({"status", "submission_id", "driver_state", "app_id", "ui_url", "message", "staging"})
"""Every event the trigger yields has exactly these keys; ``status`` is ``success`` or ``failed``."""


@dataclass(frozen=True)
class DriverPoll:
    """
    What one poll of the driver says.

    :param submission_id: the driver id (``driver-...``).
    :param outcome: :data:`RUNNING`, :data:`SUCCESS` or :data:`FAILED`.
    :param driver_state: the master's state of the driver (the last one read, when this poll could not read it).
    :param message: the master's message (an ERROR driver's exception), or why the state could not be read.
    :param app_id: the Spark application id, once the driver wrote ``status.json``.
    :param ui_url: its live Spark UI, if it has one.
    :param state_changed: the driver state differs from the previous poll's (the loops log it).
    :param app_started: the application is known from this poll on, not before (the loops report it once).
    """

    submission_id: str
    outcome: str
    driver_state: str | None
    message: str | None = None
    app_id: str | None = None
    ui_url: str | None = None
    state_changed: bool = False
    app_started: bool = False

    @property
    def done(self) -> bool:
        """Whether the wait is over (the driver ended, or its state cannot be read)."""
        return self.outcome != RUNNING

    @property
    def app(self) -> tuple[str | None, str | None]:
        """``(app_id, ui_url)``."""
        return self.app_id, self.ui_url

    def event(self, staging: str) -> dict[str, Any]:
        """
        The trigger's event payload for this poll (:data:`EVENT_KEYS`).

        :param staging: the staging record the trigger was given.
        :raises ValueError: the driver is still running (there is no event to yield yet).
        """
        if not self.done:
            raise ValueError(f"driver {self.submission_id} is still {self.driver_state}: no event yet")
        return {"status": self.outcome, "submission_id": self.submission_id, "driver_state": self.driver_state,
                "app_id": self.app_id, "ui_url": self.ui_url, "message": self.message, "staging": staging}


def driver_failure(driver_state: str | None, message: str | None) -> RuntimeError:
    """
    The cause kept under a job's error when its driver did not end FINISHED.

    :param driver_state: the driver's final state.
    :param message: the master's message, if any.
    :return: ``RuntimeError("driver state FAILED: ...")``.
    """
    return RuntimeError(f"driver state {driver_state}: {message or 'no message'}")


def validate_event(event: Any) -> dict[str, Any]:
    """
    Check a trigger event before the operator acts on it.

    :param event: what the trigger yielded (persisted by Airflow while the task was deferred).
    :return: the event.
    :raises ValueError: not a dict with exactly :data:`EVENT_KEYS`, or an unknown ``status``.
    """
    if not isinstance(event, dict) or set(event) != EVENT_KEYS:
        raise ValueError(f"unexpected trigger event {event!r}: expected the keys {sorted(EVENT_KEYS)}")
    if event["status"] not in (SUCCESS, FAILED):
        raise ValueError(f"unexpected trigger event status {event['status']!r}: expected 'success' or 'failed'")
    return event
