"""
Value objects of the Spark standalone master: its state page (``GET {master_ui}/json/``) and its REST submission
server (``{rest}/v1/submissions/...``).

Same conventions as :mod:`~airflow_provider_horovod.clients.spark_app_models`: frozen dataclasses, ``from_json``
and ``to_dict`` with Spark's keys. Memory is in MiB (``_mb``) as the master writes it, times are epochs in
milliseconds (``_ms``; the master writes a driver's start time as a string, read here as an integer).
"""

from __future__ import annotations

from dataclasses import dataclass

from airflow_provider_horovod.clients._fields import (
    BOOL, INT, OPT_INT, OPT_STR, STR, JsonRecord, records, spark_field,
)

DRIVER_SUCCESS_STATES = frozenset({"FINISHED"})
DRIVER_FAILURE_STATES = frozenset({"FAILED", "KILLED", "ERROR"})
DRIVER_TERMINAL_STATES = DRIVER_SUCCESS_STATES | DRIVER_FAILURE_STATES
DRIVER_ACTIVE_STATES = frozenset({"SUBMITTED", "RUNNING", "RELAUNCHING"})
DRIVER_TRANSIENT_STATES = frozenset({"UNKNOWN"})
"""UNKNOWN: the master lost track of the driver's worker for a while (it may come back); keep polling."""


@dataclass(frozen=True)
class WorkerInfo(JsonRecord):
    """A worker as the master sees it."""

    id: str = spark_field("id", STR)
    host: str = spark_field("host", STR)
    port: int = spark_field("port", INT)
    web_ui_address: str | None = spark_field("webuiaddress", OPT_STR)
    cores: int = spark_field("cores", INT)
    cores_used: int = spark_field("coresused", INT)
    memory_mb: int = spark_field("memory", INT)
    memory_used_mb: int = spark_field("memoryused", INT)
    state: str = spark_field("state", STR)
    """``ALIVE``, ``DEAD``, ``DECOMMISSIONED`` or ``UNKNOWN``."""
    last_heartbeat_ms: int | None = spark_field("lastheartbeat", OPT_INT)


@dataclass(frozen=True)
class MasterApplication(JsonRecord):
    """An application registered with the master (active or completed)."""

    id: str = spark_field("id", STR)
    name: str = spark_field("name", STR)
    cores: int = spark_field("cores", INT)
    """Cores granted (the requested maximum while the application waits)."""
    user: str | None = spark_field("user", OPT_STR)
    memory_per_executor_mb: int | None = spark_field("memoryperexecutor", OPT_INT)
    state: str = spark_field("state", STR)
    """``WAITING``, ``RUNNING``, ``FINISHED``, ``FAILED``, ``KILLED`` or ``UNKNOWN``."""
    start_time_ms: int | None = spark_field("starttime", OPT_INT)
    duration_ms: int | None = spark_field("duration", OPT_INT)
    submit_date: str | None = spark_field("submitdate", OPT_STR)


@dataclass(frozen=True)
class MasterDriver(JsonRecord):
    """A driver launched by the master (cluster deploy mode), active or completed."""

    id: str = spark_field("id", STR)
    state: str = spark_field("state", STR)
    worker_id: str | None = spark_field("worker", OPT_STR)
    main_class: str | None = spark_field("mainclass", OPT_STR)
    cores: int | None = spark_field("cores", OPT_INT)
    memory_mb: int | None = spark_field("memory", OPT_INT)
    start_time_ms: int | None = spark_field("starttime", OPT_INT)
    submit_date: str | None = spark_field("submitdate", OPT_STR)


@dataclass(frozen=True)
class MasterState(JsonRecord):
    """The standalone master's state page, ``GET {master_ui}/json/``."""

    url: str = spark_field("url", STR)
    """The master URL, ``spark://host:port``."""
    status: str | None = spark_field("status", OPT_STR)
    """``ALIVE`` for the leader, ``STANDBY`` for a standby master."""
    workers: tuple[WorkerInfo, ...] = spark_field("workers", records(WorkerInfo))
    alive_workers: int = spark_field("aliveworkers", INT)
    cores: int = spark_field("cores", INT)
    cores_used: int = spark_field("coresused", INT)
    memory_mb: int | None = spark_field("memory", OPT_INT)
    memory_used_mb: int | None = spark_field("memoryused", OPT_INT)
    active_apps: tuple[MasterApplication, ...] = spark_field("activeapps", records(MasterApplication))
    completed_apps: tuple[MasterApplication, ...] = spark_field("completedapps", records(MasterApplication))
    active_drivers: tuple[MasterDriver, ...] = spark_field("activedrivers", records(MasterDriver))
    completed_drivers: tuple[MasterDriver, ...] = spark_field("completeddrivers", records(MasterDriver))

    def driver(self, submission_id: str) -> MasterDriver | None:
        """The active or completed driver with this id, or ``None``."""
        return next((d for d in self.active_drivers + self.completed_drivers if d.id == submission_id), None)

    def application(self, app_id: str) -> MasterApplication | None:
        """The active or completed application with this id, or ``None``."""
        return next((a for a in self.active_apps + self.completed_apps if a.id == app_id), None)


@dataclass(frozen=True)
class SubmissionResponse(JsonRecord):
    """The answer to ``create`` or ``kill`` on the REST submission server."""

    action: str = spark_field("action", STR)
    submission_id: str | None = spark_field("submissionId", OPT_STR)
    success: bool = spark_field("success", BOOL)
    message: str | None = spark_field("message", OPT_STR)
    server_spark_version: str | None = spark_field("serverSparkVersion", OPT_STR)


@dataclass(frozen=True)
class DriverStatus(JsonRecord):
    """
    The answer to ``GET {rest}/v1/submissions/status/{id}``.

    ``driver_state`` is one of SUBMITTED, RUNNING, RELAUNCHING (active), FINISHED (success), FAILED, KILLED,
    ERROR (failure) or UNKNOWN (transient: the master lost the driver's worker for now). ``message`` carries the
    exception of an ERROR driver.
    """

    submission_id: str | None = spark_field("submissionId", OPT_STR)
    success: bool = spark_field("success", BOOL)
    driver_state: str | None = spark_field("driverState", OPT_STR)
    """``None`` only when ``success`` is false (the master does not know this submission)."""
    worker_id: str | None = spark_field("workerId", OPT_STR)
    worker_host_port: str | None = spark_field("workerHostPort", OPT_STR)
    message: str | None = spark_field("message", OPT_STR)
    server_spark_version: str | None = spark_field("serverSparkVersion", OPT_STR)

    @property
    def is_terminal(self) -> bool:
        """Whether the driver has ended (FINISHED, FAILED, KILLED or ERROR)."""
        return self.driver_state in DRIVER_TERMINAL_STATES

    @property
    def is_successful(self) -> bool:
        """Whether the driver ended successfully (FINISHED)."""
        return self.driver_state in DRIVER_SUCCESS_STATES

    @property
    def is_failed(self) -> bool:
        """Whether the driver ended unsuccessfully (FAILED, KILLED or ERROR)."""
        return self.driver_state in DRIVER_FAILURE_STATES

    @property
    def is_active(self) -> bool:
        """Whether the driver is waiting for a worker, running, or being relaunched."""
        return self.driver_state in DRIVER_ACTIVE_STATES

    @property
    def is_transient(self) -> bool:
        """Whether the state says nothing yet (UNKNOWN): poll again."""
        return self.driver_state in DRIVER_TRANSIENT_STATES

