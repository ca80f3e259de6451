"""
One poll of a cluster-mode driver, as both waits for it read it: the task's own loop
(:class:`~airflow_provider_horovod.operators.modes.cluster.ClusterMode`, blocking) and the deferral trigger
(:class:`~airflow_provider_horovod.triggers.horovod.HorovodSparkJobTrigger`, asyncio).
:func:`read_poll` makes a :class:`DriverPoll` from
the master's answer and what the staging directory holds; the loops only read, log, sleep.

The trigger's event is :meth:`DriverPoll.event`; the operator checks it with :func:`validate_event` when it resumes.
Its keys (:data:`EVENT_KEYS`) are persisted with a deferred task: they never change. Once the wait is over,
:func:`read_result` reads the job's result.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from airflow_provider_horovod.clients import DriverStatus, SparkRestError
from airflow_provider_horovod.runtime.driver.program import STATUS_FILE
from airflow_provider_horovod.runtime.wire.progress_format import (
    PROGRESS_FILE,
    earlier_restart_line,
    progress_line,
    restart_line,
    resume_line,
)
from airflow_provider_horovod.utils.job_result import JobResult, Kill, read_job_result

__all__ = [
    "EVENT_KEYS",
    "FAILED",
    "RUNNING",
    "SUCCESS",
    "DriverPoll",
    "ProgressLog",
    "driver_failure",
    "outside_kill",
    "read_app",
    "read_poll",
    "read_progress",
    "read_result",
    "validate_event",
]

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
        return {
            "status": self.outcome,
            "submission_id": self.submission_id,
            "driver_state": self.driver_state,
            "app_id": self.app_id,
            "ui_url": self.ui_url,
            "message": self.message,
            "staging": staging,
        }


def driver_failure(driver_state: str | None, message: str | None) -> RuntimeError:
    """
    The cause kept under a job's error when its driver did not end FINISHED.

    :param driver_state: the driver's final state.
    :param message: the master's message, if any.
    :return: ``RuntimeError("driver state FAILED: ...")``.
    """
    return RuntimeError(f"driver state {driver_state}: {message or 'no message'}")


def outside_kill(
    submission_id: str, driver_state: str | None, app_id: str | None, app_state: str | None = None
) -> str | None:
    """
    The headline for a driver that was killed through the master rather than failing on its own, else ``None``.

    A driver killed through the REST API (``/v1/submissions/kill``) or the master UI's kill link ends ``KILLED``;
    an application killed from the master UI ends ``KILLED`` in the master's state (``/json/``), while its
    driver, whose SparkContext was shut down under it, ends ``FAILED``. Either way the dying driver's last
    exception (``Py4JNetworkError``, "SparkContext was shut down") is only a consequence.

    :param submission_id: the driver id.
    :param driver_state: the driver's final state.
    :param app_id: its Spark application id, when it had started one.
    :param app_state: the application's state on the master, when known.
    :return: e.g. ``Spark driver driver-... was KILLED from outside this task ...``, or ``None``.
    """
    app = f" (application {app_id})" if app_id else ""
    if driver_state == "KILLED":
        return (
            f"Spark driver {submission_id}{app} was KILLED from outside this task, through the standalone "
            f"master (its REST API's kill or the master UI's kill link); driver state {driver_state}"
        )
    if not app_id or driver_state == "FINISHED" or app_state != "KILLED":
        return None
    return (
        f"Spark application {app_id} of driver {submission_id} was KILLED from outside this task, through "
        f"the standalone master (the master UI's kill link or its REST API); application state KILLED, "
        f"driver state {driver_state}"
    )


def read_result(staging: Any, status: DriverStatus | None = None, *, killed: Kill | None = None) -> JobResult:
    """
    The job's result from the staging directory once the wait is over; the driver's state explains a missing result.

    :param staging: the try's staging directory (a :class:`~airflow_provider_horovod.utils.staging.Staging`, a path
        or a URI).
    :param status: the driver's final state, when known.
    :param killed: a :class:`~airflow_provider_horovod.utils.job_result.Kill` when the job was killed (its headline
        from :meth:`~airflow_provider_horovod.standalone.hook.HorovodStandaloneHook.killed_from_outside`, or this
        task's own kill): said first, the driver's own account follows, and the error is a ``HorovodJobKilledError``.
    :raises HorovodJobError: the job failed, or left no result (``HorovodJobKilledError`` when it was killed).
    """
    cause = None
    if status is not None and not status.is_successful:
        cause = driver_failure(status.driver_state, status.message)
    return read_job_result(staging, submit_error=cause, killed=killed)


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


class ProgressLog:
    """
    Which progress lines a wait for a cluster-mode driver logs: the driver's ``progress.json`` (in the staging
    directory) as :func:`~airflow_provider_horovod.runtime.wire.progress_format.progress_line` puts it, when it is newer
    than the last line logged and at most every ``interval_s``; once, the line that says the try resumed from a
    checkpoint (``resuming from checkpoint step 20 (try 2), saved by try 1, from ...``); at once, a line for each
    restart of the job within the try (``restart 1/3: executor 1 on 10.0.0.7 lost ... at step 812; starting again in
    1 s``), as the driver prints it; a restart in the first snapshot it reads whose time is before ``since`` (a retry
    that reattached to the running driver, a trigger run again) as one that happened before this wait began.

    :param interval_s: seconds between lines at least.
    :param clock: a monotonic clock (tests).
    :param since: when this wait began, seconds since the epoch (the restarts' ``at`` is the driver's clock);
        ``None``: every restart is told as it happens.
    """

    def __init__(
        self, interval_s: float = 5.0, clock: Callable[[], float] = time.monotonic, since: float | None = None
    ) -> None:
        self.interval_s = interval_s
        self._clock = clock
        self._since = since
        self._seen: float | None = None
        self._logged_at: float | None = None
        self._resume_logged = False
        self._restarts_logged = 0
        self._read = False

    def _earlier(self, restart: dict[str, Any]) -> bool:
        """Whether ``restart`` (read in this wait's first snapshot) came before the wait began: its ``at`` (the
        driver's clock) before ``since`` (this side's). A restart from a later snapshot never is, so a clock skew
        between the two hosts can only matter in the first seconds of a wait."""
        at = restart.get("at")
        return (
            self._since is not None and isinstance(at, (int, float)) and not isinstance(at, bool) and at < self._since
        )

    def line(self, data: bytes | None) -> str | None:
        """
        The line to log for what ``progress.json`` holds now, or ``None`` (nothing new, too soon, or unreadable).

        :param data: the file's bytes, ``None`` when there is none yet.
        """
        if not data:
            return None
        try:
            snapshot = json.loads(data)
        except ValueError:
            return None  # a write in progress on a store without atomic replace: the next poll reads it
        if not isinstance(snapshot, dict) or snapshot.get("time") == self._seen:
            return None
        first_read, self._read = not self._read, True
        restarts = [r for r in snapshot.get("restarts") or () if isinstance(r, dict)]
        if len(restarts) > self._restarts_logged:  # each once, at once
            new, self._restarts_logged = restarts[self._restarts_logged :], len(restarts)
            self._resume_logged = False  # the restarted attempt resumes from a checkpoint again: say so again
            return "\n".join(
                earlier_restart_line(r) if first_read and self._earlier(r) else restart_line(r) for r in new
            )
        if isinstance(snapshot.get("resumed"), dict) and not self._resume_logged:  # once, at once
            self._resume_logged = True
            return resume_line(snapshot["resumed"])
        now = self._clock()
        if self._logged_at is not None and now - self._logged_at < self.interval_s:
            return None
        line = progress_line(snapshot)
        if line is not None:
            self._seen, self._logged_at = snapshot.get("time"), now
        return line


def read_progress(staging: Any) -> bytes | None:
    """
    The driver's ``progress.json`` in a try's staging directory (the ranks' ``report()`` progress), ``None`` before
    there is one.

    :param staging: the staging directory (a :class:`~airflow_provider_horovod.utils.staging.Staging`, a path or a
        URI).
    """
    from airflow_provider_horovod.utils.staging import Staging

    try:
        return Staging.of(staging).read_bytes(PROGRESS_FILE)
    except OSError:
        return None


def read_app(staging: Any) -> tuple[str | None, str | None]:
    """
    ``(app_id, ui_url)`` once the driver has written ``status.json`` into a try's staging directory, else
    ``(None, None)``.

    :param staging: the staging directory (a :class:`~airflow_provider_horovod.utils.staging.Staging`, a path or a
        URI).
    """
    from airflow_provider_horovod.utils.staging import Staging

    try:
        data = json.loads(Staging.of(staging).read_bytes(STATUS_FILE) or b"")
    except (OSError, ValueError):
        return None, None
    return data.get("app_id"), data.get("ui_url")


def read_poll(
    submission_id: str,
    status: DriverStatus | SparkRestError,
    app: tuple[str | None, str | None],
    last: DriverPoll | None = None,
) -> DriverPoll:
    """
    What one poll of the driver says, for both waits (the task's own loop and the deferral trigger): whether it
    still runs, finished or failed, what changed since the previous poll, and the trigger's event once it ended.

    :param submission_id: the driver id (``driver-...``).
    :param status: the REST submission server's answer, or the error that came instead (the trigger's wait ends
        on it, failed; the task's own wait lets it raise).
    :param app: ``(app_id, ui_url)`` from the staging directory
        (:func:`read_app`), ``(None, None)``
        before the driver wrote ``status.json``; once known, the previous poll's stands.
    :param last: the previous poll, ``None`` on the first.
    :return: the poll: :attr:`DriverPoll.done` once the driver is
        FINISHED (``success``), FAILED, KILLED or ERROR (``failed``) or its state cannot be read (``failed``,
        with the last state read); SUBMITTED, RUNNING, RELAUNCHING and UNKNOWN go on.
    """
    known = last.app if last is not None and last.app_id is not None else None
    app_id, ui_url = known or app
    last_state = None if last is None else last.driver_state
    if isinstance(status, SparkRestError):
        return DriverPoll(
            submission_id,
            FAILED,
            last_state,
            f"cannot read driver {submission_id}'s state: {status}",
            app_id,
            ui_url,
            app_started=app_id is not None and known is None,
        )
    outcome = RUNNING if not status.is_terminal else SUCCESS if status.is_successful else FAILED
    return DriverPoll(
        submission_id,
        outcome,
        status.driver_state,
        status.message,
        app_id,
        ui_url,
        state_changed=status.driver_state != last_state,
        app_started=app_id is not None and known is None,
    )
