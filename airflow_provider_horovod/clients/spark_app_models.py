"""
Value objects of the Spark monitoring API of one application (``{ui}/api/v1/...``).

Each is a frozen pydantic model (:class:`~._spark_model.CamelCaseModel`) built with ``from_json`` from one decoded
JSON object and written back with ``to_dict`` (Spark's own camelCase keys: each field's name in camelCase, or the key
it names, so ``from_json(x.to_dict()) == x``); a bad payload raises
:class:`~.spark_rest_errors.SparkRestPayloadError`. Only the fields useful to follow a job are kept; unknown fields
are ignored, so newer Spark versions parse too. Times are kept as Spark writes them (ISO strings such as
``"2026-11-30T07:38:32.175GMT"``), durations in milliseconds (``_ms``), memory in bytes.

Note the API's own inconsistency: jobs count finished tasks in ``numCompletedTasks``, stages in
``numCompleteTasks``; both land in ``num_completed_tasks`` here.
"""

from __future__ import annotations

from pydantic import Field

from airflow_provider_horovod.clients._spark_model import (
    Bool,
    CamelCaseModel,
    EpochMs,
    Int,
    Ints,
    Resources,
    Str,
    StrMap,
    Strs,
    state_in,
)

__all__ = [
    "JOB_TERMINAL_STATES",
    "STAGE_TERMINAL_STATES",
    "ApplicationAttempt",
    "ApplicationInfo",
    "ExecutorInfo",
    "JobInfo",
    "StageInfo",
]

JOB_TERMINAL_STATES = frozenset({"SUCCEEDED", "FAILED"})
"""Job statuses (``JobExecutionStatus``) after which nothing changes; the others are RUNNING and UNKNOWN."""
STAGE_TERMINAL_STATES = frozenset({"COMPLETE", "FAILED", "SKIPPED"})
"""Stage statuses after which the attempt changes no more; the others are ACTIVE and PENDING."""


class ApplicationAttempt(CamelCaseModel):
    """One attempt of an application (live UIs show one; the history server may show several)."""

    attempt_id: Str | None = None
    start_time: Str
    duration_ms: Int | None = Field(None, alias="duration")
    spark_user: Str | None = None
    completed: Bool
    app_spark_version: Str | None = None
    start_time_epoch_ms: EpochMs = Field(None, alias="startTimeEpoch")
    end_time_epoch_ms: EpochMs = Field(None, alias="endTimeEpoch")
    """``None`` while the attempt runs (Spark writes ``-1``, and 1969-12-31 as ``endTime``, not kept here)."""


class ApplicationInfo(CamelCaseModel):
    """An entry of ``GET /api/v1/applications``."""

    id: Str
    name: Str
    attempts: tuple[ApplicationAttempt, ...] = ()

    @property
    def latest_attempt(self) -> ApplicationAttempt | None:
        """The attempt that started last (``None`` if Spark listed none)."""
        return max(self.attempts, key=lambda a: a.start_time_epoch_ms or 0, default=None)

    @property
    def completed(self) -> bool:
        """Whether the latest attempt has completed (a live UI says ``False`` until the application stops)."""
        latest = self.latest_attempt
        return bool(latest and latest.completed)


class JobInfo(CamelCaseModel):
    """An entry of ``GET /api/v1/applications/{id}/jobs`` (one Spark job, i.e. one action)."""

    job_id: Int
    name: Str
    description: Str | None = None
    status: Str
    """``RUNNING``, ``SUCCEEDED``, ``FAILED`` or ``UNKNOWN``."""
    submission_time: Str | None = None
    completion_time: Str | None = None
    stage_ids: Ints = ()
    job_group: Str | None = None
    job_tags: Strs = ()
    num_tasks: Int
    num_active_tasks: Int
    num_completed_tasks: Int
    num_skipped_tasks: Int
    num_failed_tasks: Int
    num_killed_tasks: Int
    num_active_stages: Int
    num_completed_stages: Int
    num_skipped_stages: Int
    num_failed_stages: Int

    is_terminal = state_in(JOB_TERMINAL_STATES, "Whether the job has SUCCEEDED or FAILED.")


class StageInfo(CamelCaseModel):
    """An entry of ``GET /api/v1/applications/{id}/stages`` (one attempt of one stage)."""

    stage_id: Int
    attempt_id: Int
    name: Str
    status: Str
    """``ACTIVE``, ``COMPLETE``, ``FAILED``, ``PENDING`` or ``SKIPPED``."""
    num_tasks: Int
    num_active_tasks: Int
    num_completed_tasks: Int = Field(alias="numCompleteTasks")
    """From ``numCompleteTasks`` (jobs say ``numCompletedTasks``)."""
    num_failed_tasks: Int
    num_killed_tasks: Int
    submission_time: Str | None = None
    first_task_launched_time: Str | None = None
    completion_time: Str | None = None
    failure_reason: Str | None = None
    """Why the attempt failed (the failing task's exception and traceback), only on FAILED stages."""
    executor_run_time_ms: Int | None = Field(None, alias="executorRunTime")

    is_terminal = state_in(STAGE_TERMINAL_STATES, "Whether this stage attempt is COMPLETE, FAILED or SKIPPED.")


class ExecutorInfo(CamelCaseModel):
    """An entry of ``GET /api/v1/applications/{id}/executors`` (the driver is listed too, with id ``"driver"``)."""

    id: Str
    host_port: Str
    is_active: Bool
    total_cores: Int
    max_tasks: Int | None = None
    active_tasks: Int
    failed_tasks: Int
    completed_tasks: Int
    total_tasks: Int
    total_duration_ms: Int | None = Field(None, alias="totalDuration")
    memory_used_bytes: Int | None = Field(None, alias="memoryUsed")
    max_memory_bytes: Int | None = Field(None, alias="maxMemory")
    add_time: Str | None = None
    remove_time: Str | None = None
    remove_reason: Str | None = None
    executor_logs: StrMap = {}
    """Log name (``stdout``, ``stderr``) to the worker's log page URL."""
    resources: Resources = {}
    """Custom resource name (``gpu``) to the addresses assigned to this executor."""

    @property
    def is_driver(self) -> bool:
        """Whether this entry is the driver rather than an executor."""
        return self.id == "driver"
