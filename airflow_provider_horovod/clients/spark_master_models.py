"""
Value objects of the Spark standalone master: its state page (``GET {master_ui}/json/``) and its REST submission
server (``{rest}/v1/submissions/...``).

Same conventions as :mod:`~airflow_provider_horovod.clients.spark_app_models`: frozen pydantic models,
``from_json`` and ``to_dict`` with Spark's keys (the state page's run together in lowercase,
:class:`~._spark_model.RunTogetherModel`; the submission server's in camelCase). Memory is in MiB (``_mb``) as the
master writes it, times are epochs in milliseconds (``_ms``; the master writes a driver's start time as a string,
read here as an integer).
"""

from __future__ import annotations

from pydantic import Field

from airflow_provider_horovod.clients._spark_model import (
    Bool,
    CamelCaseModel,
    Int,
    RunTogetherModel,
    Str,
    state_in,
)
from airflow_provider_horovod.clients.spark_rest_errors import SparkSubmissionError

DRIVER_SUCCESS_STATES = frozenset({"FINISHED"})
DRIVER_FAILURE_STATES = frozenset({"FAILED", "KILLED", "ERROR"})
DRIVER_TERMINAL_STATES = DRIVER_SUCCESS_STATES | DRIVER_FAILURE_STATES
DRIVER_ACTIVE_STATES = frozenset({"SUBMITTED", "RUNNING", "RELAUNCHING"})
DRIVER_TRANSIENT_STATES = frozenset({"UNKNOWN"})
"""UNKNOWN: the master lost track of the driver's worker for a while (it may come back); keep polling."""


class WorkerInfo(RunTogetherModel):
    """A worker as the master sees it."""

    id: Str
    host: Str
    port: Int
    web_ui_address: Str | None = None
    cores: Int
    cores_used: Int
    memory_mb: Int = Field(alias="memory")
    memory_used_mb: Int = Field(alias="memoryused")
    state: Str
    """``ALIVE``, ``DEAD``, ``DECOMMISSIONED`` or ``UNKNOWN``."""
    last_heartbeat_ms: Int | None = Field(None, alias="lastheartbeat")


class MasterApplication(RunTogetherModel):
    """An application registered with the master (active or completed)."""

    id: Str
    name: Str
    cores: Int
    """Cores granted (the requested maximum while the application waits)."""
    user: Str | None = None
    memory_per_executor_mb: Int | None = Field(None, alias="memoryperexecutor")
    state: Str
    """``WAITING``, ``RUNNING``, ``FINISHED``, ``FAILED``, ``KILLED`` or ``UNKNOWN``."""
    start_time_ms: Int | None = Field(None, alias="starttime")
    duration_ms: Int | None = Field(None, alias="duration")
    submit_date: Str | None = None


class MasterDriver(RunTogetherModel):
    """A driver launched by the master (cluster deploy mode), active or completed."""

    id: Str
    state: Str
    worker_id: Str | None = Field(None, alias="worker")
    main_class: Str | None = None
    cores: Int | None = None
    memory_mb: Int | None = Field(None, alias="memory")
    start_time_ms: Int | None = Field(None, alias="starttime")
    submit_date: Str | None = None


class MasterState(RunTogetherModel):
    """The standalone master's state page, ``GET {master_ui}/json/``."""

    url: Str
    """The master URL, ``spark://host:port``."""
    status: Str | None = None
    """``ALIVE`` for the leader, ``STANDBY`` for a standby master."""
    workers: tuple[WorkerInfo, ...] = ()
    alive_workers: Int
    cores: Int
    cores_used: Int
    memory_mb: Int | None = Field(None, alias="memory")
    memory_used_mb: Int | None = Field(None, alias="memoryused")
    active_apps: tuple[MasterApplication, ...] = ()
    completed_apps: tuple[MasterApplication, ...] = ()
    active_drivers: tuple[MasterDriver, ...] = ()
    completed_drivers: tuple[MasterDriver, ...] = ()

    def driver(self, submission_id: str) -> MasterDriver | None:
        """The active or completed driver with this id, or ``None``."""
        return next((d for d in self.active_drivers + self.completed_drivers if d.id == submission_id), None)

    def application(self, app_id: str) -> MasterApplication | None:
        """The active or completed application with this id, or ``None``."""
        return next((a for a in self.active_apps + self.completed_apps if a.id == app_id), None)

    def driver_status(self, submission_id: str) -> DriverStatus:
        """
        The driver's state as the REST submission server's status call would give it, from this page (cluster
        deploy mode through spark-submit's legacy gateway, where the master runs no REST server): the same states,
        no message (the page has none).

        :param submission_id: the driver id (``driver-...``).
        :raises SparkSubmissionError: the master does not know the driver (as the REST status call raises).
        """
        driver = self.driver(submission_id)
        if driver is None:
            raise SparkSubmissionError(
                f"the master does not know submission {submission_id!r} (the state page "
                f"of {self.url} lists no such driver)"
            )
        return DriverStatus(
            submission_id=submission_id, success=True, driver_state=driver.state, worker_id=driver.worker_id
        )


class SubmissionResponse(CamelCaseModel):
    """The answer to ``create`` or ``kill`` on the REST submission server."""

    action: Str
    submission_id: Str | None = None
    success: Bool
    message: Str | None = None
    server_spark_version: Str | None = None


def _driver_state_in(states: frozenset[str], doc: str) -> property:
    return state_in(states, doc, field="driver_state")


class DriverStatus(CamelCaseModel):
    """
    The answer to ``GET {rest}/v1/submissions/status/{id}``.

    ``driver_state`` is one of SUBMITTED, RUNNING, RELAUNCHING (active), FINISHED (success), FAILED, KILLED,
    ERROR (failure) or UNKNOWN (transient: the master lost the driver's worker for now). ``message`` carries the
    exception of an ERROR driver.
    """

    submission_id: Str | None = None
    success: Bool
    driver_state: Str | None = None
    """``None`` only when ``success`` is false (the master does not know this submission)."""
    worker_id: Str | None = None
    worker_host_port: Str | None = None
    message: Str | None = None
    server_spark_version: Str | None = None

    is_terminal = _driver_state_in(
        DRIVER_TERMINAL_STATES, "Whether the driver has ended (FINISHED, FAILED, KILLED or ERROR)."
    )
    is_successful = _driver_state_in(DRIVER_SUCCESS_STATES, "Whether the driver ended successfully (FINISHED).")
    is_failed = _driver_state_in(
        DRIVER_FAILURE_STATES, "Whether the driver ended unsuccessfully (FAILED, KILLED or ERROR)."
    )
    is_active = _driver_state_in(
        DRIVER_ACTIVE_STATES, "Whether the driver is waiting for a worker, running, or being relaunched."
    )
    is_transient = _driver_state_in(
        DRIVER_TRANSIENT_STATES, "Whether the state says nothing yet (UNKNOWN): poll again."
    )
