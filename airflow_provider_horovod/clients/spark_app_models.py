"""
Value objects of the Spark monitoring API of one application (``{ui}/api/v1/...``).

Each is a frozen dataclass built with ``from_json`` from one decoded JSON object and written back with ``to_dict``
(Spark's own camelCase keys, so ``from_json(x.to_dict()) == x``). Only the fields useful to follow a job are
kept; unknown fields are ignored, so newer Spark versions parse too. Times are kept as Spark writes them (ISO
strings such as ``"2026-11-30T07:38:32.175GMT"``), durations in milliseconds (``_ms``), memory in bytes.

Note the API's own inconsistency: jobs count finished tasks in ``numCompletedTasks``, stages in
``numCompleteTasks``; both land in ``num_completed_tasks`` here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from airflow_provider_horovod.clients._fields import (
    BOOL, EPOCH_MS, INT, INTS, OPT_INT, OPT_STR, STR, STR_MAP, STRS, JsonRecord, Kind, obj, objs, records,
    spark_field, str_list,
)
from airflow_provider_horovod.clients.spark_rest_errors import SparkRestPayloadError

JOB_TERMINAL_STATES = frozenset({"SUCCEEDED", "FAILED"})
"""Job statuses (``JobExecutionStatus``) after which nothing changes; the others are RUNNING and UNKNOWN."""
STAGE_TERMINAL_STATES = frozenset({"COMPLETE", "FAILED", "SKIPPED"})
"""Stage statuses after which the attempt changes no more; the others are ACTIVE and PENDING."""


@dataclass(frozen=True)
class ApplicationAttempt(JsonRecord):
    """One attempt of an application (live UIs show one; the history server may show several)."""

    attempt_id: str | None = spark_field("attemptId", OPT_STR)
    start_time: str = spark_field("startTime", STR)
    duration_ms: int | None = spark_field("duration", OPT_INT)
    spark_user: str | None = spark_field("sparkUser", OPT_STR)
    completed: bool = spark_field("completed", BOOL)
    app_spark_version: str | None = spark_field("appSparkVersion", OPT_STR)
    start_time_epoch_ms: int | None = spark_field("startTimeEpoch", EPOCH_MS)
    end_time_epoch_ms: int | None = spark_field("endTimeEpoch", EPOCH_MS)
    """``None`` while the attempt runs (Spark writes ``-1``, and 1969-12-31 as ``endTime``, not kept here)."""


@dataclass(frozen=True)
class ApplicationInfo(JsonRecord):
    """An entry of ``GET /api/v1/applications``."""

    id: str = spark_field("id", STR)
    name: str = spark_field("name", STR)
    attempts: tuple[ApplicationAttempt, ...] = spark_field("attempts", records(ApplicationAttempt))

    @property
    def latest_attempt(self) -> ApplicationAttempt | None:
        """The attempt that started last (``None`` if Spark listed none)."""
        return max(self.attempts, key=lambda a: a.start_time_epoch_ms or 0, default=None)

    @property
    def completed(self) -> bool:
        """Whether the latest attempt has completed (a live UI says ``False`` until the application stops)."""
        latest = self.latest_attempt
        return bool(latest and latest.completed)


@dataclass(frozen=True)
class JobInfo(JsonRecord):
    """An entry of ``GET /api/v1/applications/{id}/jobs`` (one Spark job, i.e. one action)."""

    job_id: int = spark_field("jobId", INT)
    name: str = spark_field("name", STR)
    description: str | None = spark_field("description", OPT_STR)
    status: str = spark_field("status", STR)
    """``RUNNING``, ``SUCCEEDED``, ``FAILED`` or ``UNKNOWN``."""
    submission_time: str | None = spark_field("submissionTime", OPT_STR)
    completion_time: str | None = spark_field("completionTime", OPT_STR)
    stage_ids: tuple[int, ...] = spark_field("stageIds", INTS)
    job_group: str | None = spark_field("jobGroup", OPT_STR)
    job_tags: tuple[str, ...] = spark_field("jobTags", STRS)
    num_tasks: int = spark_field("numTasks", INT)
    num_active_tasks: int = spark_field("numActiveTasks", INT)
    num_completed_tasks: int = spark_field("numCompletedTasks", INT)
    num_skipped_tasks: int = spark_field("numSkippedTasks", INT)
    num_failed_tasks: int = spark_field("numFailedTasks", INT)
    num_killed_tasks: int = spark_field("numKilledTasks", INT)
    num_active_stages: int = spark_field("numActiveStages", INT)
    num_completed_stages: int = spark_field("numCompletedStages", INT)
    num_skipped_stages: int = spark_field("numSkippedStages", INT)
    num_failed_stages: int = spark_field("numFailedStages", INT)

    @property
    def is_terminal(self) -> bool:
        """Whether the job has SUCCEEDED or FAILED."""
        return self.status in JOB_TERMINAL_STATES


@dataclass(frozen=True)
class StageInfo(JsonRecord):
    """An entry of ``GET /api/v1/applications/{id}/stages`` (one attempt of one stage)."""

    stage_id: int = spark_field("stageId", INT)
    attempt_id: int = spark_field("attemptId", INT)
    name: str = spark_field("name", STR)
    status: str = spark_field("status", STR)
    """``ACTIVE``, ``COMPLETE``, ``FAILED``, ``PENDING`` or ``SKIPPED``."""
    num_tasks: int = spark_field("numTasks", INT)
    num_active_tasks: int = spark_field("numActiveTasks", INT)
    num_completed_tasks: int = spark_field("numCompleteTasks", INT)
    """From ``numCompleteTasks`` (jobs say ``numCompletedTasks``)."""
    num_failed_tasks: int = spark_field("numFailedTasks", INT)
    num_killed_tasks: int = spark_field("numKilledTasks", INT)
    submission_time: str | None = spark_field("submissionTime", OPT_STR)
    first_task_launched_time: str | None = spark_field("firstTaskLaunchedTime", OPT_STR)
    completion_time: str | None = spark_field("completionTime", OPT_STR)
    failure_reason: str | None = spark_field("failureReason", OPT_STR)
    """Why the attempt failed (the failing task's exception and traceback), only on FAILED stages."""
    executor_run_time_ms: int | None = spark_field("executorRunTime", OPT_INT)

    @property
    def is_terminal(self) -> bool:
        """Whether this stage attempt is COMPLETE, FAILED or SKIPPED."""
        return self.status in STAGE_TERMINAL_STATES


def _read_resources(data: Any, key: str, what: str) -> dict[str, tuple[str, ...]]:
    value = data.get(key) or {}
    out = {}
    for name, info in obj(value, f"{what}.{key}").items():
        out[name] = str_list(obj(info, f"{what}.{key}.{name}"), "addresses", f"{what}.{key}.{name}")
    return out


RESOURCES = Kind(_read_resources, lambda value: {n: {"name": n, "addresses": list(a)} for n, a in value.items()},
                 hashable=False)
"""``{"gpu": {"name": "gpu", "addresses": ["0", "1"]}}`` held as ``{"gpu": ("0", "1")}``."""


@dataclass(frozen=True)
class ExecutorInfo(JsonRecord):
    """An entry of ``GET /api/v1/applications/{id}/executors`` (the driver is listed too, with id ``"driver"``)."""

    id: str = spark_field("id", STR)
    host_port: str = spark_field("hostPort", STR)
    is_active: bool = spark_field("isActive", BOOL)
    total_cores: int = spark_field("totalCores", INT)
    max_tasks: int | None = spark_field("maxTasks", OPT_INT)
    active_tasks: int = spark_field("activeTasks", INT)
    failed_tasks: int = spark_field("failedTasks", INT)
    completed_tasks: int = spark_field("completedTasks", INT)
    total_tasks: int = spark_field("totalTasks", INT)
    total_duration_ms: int | None = spark_field("totalDuration", OPT_INT)
    memory_used_bytes: int | None = spark_field("memoryUsed", OPT_INT)
    max_memory_bytes: int | None = spark_field("maxMemory", OPT_INT)
    add_time: str | None = spark_field("addTime", OPT_STR)
    remove_time: str | None = spark_field("removeTime", OPT_STR)
    remove_reason: str | None = spark_field("removeReason", OPT_STR)
    executor_logs: dict[str, str] = spark_field("executorLogs", STR_MAP)
    """Log name (``stdout``, ``stderr``) to the worker's log page URL."""
    resources: dict[str, tuple[str, ...]] = spark_field("resources", RESOURCES)
    """Custom resource name (``gpu``) to the addresses assigned to this executor."""

    @property
    def is_driver(self) -> bool:
        """Whether this entry is the driver rather than an executor."""
        return self.id == "driver"


def parse_list(cls: type, data: Any, what: str) -> list:
    """Parse a JSON array of ``cls`` records (``cls.from_json`` each).

    :raises SparkRestPayloadError: when ``data`` is not an array of valid objects.
    """
    if not isinstance(data, list):
        raise SparkRestPayloadError(f"{what}: expected a JSON array, got {type(data).__name__}")
    return [cls.from_json(item) for item in objs(data, what)]
