"""
Value objects of the Spark standalone master: its state page (``GET {master_ui}/json/``) and its REST submission
server (``{rest}/v1/submissions/...``).

Same conventions as :mod:`~airflow_provider_horovod.clients.spark_app_models`: frozen pydantic models,
``from_json`` and ``to_dict`` with Spark's keys. Memory is in MiB (``_mb``) as the master writes it, times are epochs in
milliseconds (``_ms``; the master writes a driver's start time as a string, read here as an integer).
"""

from __future__ import annotations

from pydantic import Field

from airflow_provider_horovod.clients._spark_model import Bool, Int, SparkModel, Str

DRIVER_SUCCESS_STATES = frozenset({"FINISHED"})
DRIVER_FAILURE_STATES = frozenset({"FAILED", "KILLED", "ERROR"})
DRIVER_TERMINAL_STATES = DRIVER_SUCCESS_STATES | DRIVER_FAILURE_STATES
DRIVER_ACTIVE_STATES = frozenset({"SUBMITTED", "RUNNING", "RELAUNCHING"})
DRIVER_TRANSIENT_STATES = frozenset({"UNKNOWN"})
"""UNKNOWN: the master lost track of the driver's worker for a while (it may come back); keep polling."""


class WorkerInfo(SparkModel):
    """A worker as the master sees it."""

    id: Str
    host: Str
    port: Int
    web_ui_address: Str | None = Field(None, alias="webuiaddress")
    cores: Int
    cores_used: Int = Field(alias="coresused")
    memory_mb: Int = Field(alias="memory")
    memory_used_mb: Int = Field(alias="memoryused")
    state: Str
    """``ALIVE``, ``DEAD``, ``DECOMMISSIONED`` or ``UNKNOWN``."""
    last_heartbeat_ms: Int | None = Field(None, alias="lastheartbeat")


class MasterApplication(SparkModel):
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
    submit_date: Str | None = Field(None, alias="submitdate")


class MasterDriver(SparkModel):
    """A driver launched by the master (cluster deploy mode), active or completed."""

    id: Str
    state: Str
    worker_id: Str | None = Field(None, alias="worker")
    main_class: Str | None = Field(None, alias="mainclass")
    cores: Int | None = None
    memory_mb: Int | None = Field(None, alias="memory")
    start_time_ms: Int | None = Field(None, alias="starttime")
    submit_date: Str | None = Field(None, alias="submitdate")


class MasterState(SparkModel):
    """The standalone master's state page, ``GET {master_ui}/json/``."""

    url: Str
    """The master URL, ``spark://host:port``."""
    status: Str | None = None
    """``ALIVE`` for the leader, ``STANDBY`` for a standby master."""
    workers: tuple[WorkerInfo, ...] = ()
    alive_workers: Int = Field(alias="aliveworkers")
    cores: Int
    cores_used: Int = Field(alias="coresused")
    memory_mb: Int | None = Field(None, alias="memory")
    memory_used_mb: Int | None = Field(None, alias="memoryused")
    active_apps: tuple[MasterApplication, ...] = Field((), alias="activeapps")
    completed_apps: tuple[MasterApplication, ...] = Field((), alias="completedapps")
    active_drivers: tuple[MasterDriver, ...] = Field((), alias="activedrivers")
    completed_drivers: tuple[MasterDriver, ...] = Field((), alias="completeddrivers")

    def driver(self, submission_id: str) -> MasterDriver | None:
        """The active or completed driver with this id, or ``None``."""
        return next((d for d in self.active_drivers + self.completed_drivers if d.id == submission_id), None)

    def application(self, app_id: str) -> MasterApplication | None:
        """The active or completed application with this id, or ``None``."""
        return next((a for a in self.active_apps + self.completed_apps if a.id == app_id), None)


class SubmissionResponse(SparkModel):
    """The answer to ``create`` or ``kill`` on the REST submission server."""

    action: Str
    submission_id: Str | None = Field(None, alias="submissionId")
    success: Bool
    message: Str | None = None
    server_spark_version: Str | None = Field(None, alias="serverSparkVersion")


class DriverStatus(SparkModel):
    """
    The answer to ``GET {rest}/v1/submissions/status/{id}``.

    ``driver_state`` is one of SUBMITTED, RUNNING, RELAUNCHING (active), FINISHED (success), FAILED, KILLED,
    ERROR (failure) or UNKNOWN (transient: the master lost the driver's worker for now). ``message`` carries the
    exception of an ERROR driver.
    """

    submission_id: Str | None = Field(None, alias="submissionId")
    success: Bool
    driver_state: Str | None = Field(None, alias="driverState")
    """``None`` only when ``success`` is false (the master does not know this submission)."""
    worker_id: Str | None = Field(None, alias="workerId")
    worker_host_port: Str | None = Field(None, alias="workerHostPort")
    message: Str | None = None
    server_spark_version: Str | None = Field(None, alias="serverSparkVersion")

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

