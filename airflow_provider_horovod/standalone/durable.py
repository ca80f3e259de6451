"""
Cluster deploy mode as a resumable job: what the persisted record and each standalone driver state mean.

With ``durable=True`` (the default, as on the Spark provider's ``SparkSubmitOperator``; Airflow 3.3+) the operator
persists ``{"submission_id", "staging", "artifact_dir", "try_number", "deferred", "cancel_on_kill"}`` of the
standalone driver to the task state store right after submitting, before it waits. When the Airflow task process dies
mid-training (worker crash, SIGKILL, node loss), the retry reads it back and asks the master:

- the driver is still active (SUBMITTED, RUNNING, RELAUNCHING, or UNKNOWN: the master lost its worker for now and
  may relaunch it) -> wait for that driver (no second driver is submitted), in sync or deferrable mode;
- it FINISHED -> read its result: the same XComs as a normal success, the first submission's artifact directory;
- it FAILED, was KILLED or ended in ERROR (never success), or the master no longer knows it -> submit afresh.

A driver that is still active but that an earlier try **gave up** is never adopted (:func:`abandoned_by`): Airflow
keeps the task state store across a clear, so without this a cleared try would reconnect to the driver that the kill
of the cleared try is taking down, and fail when that kill lands. Two signals tell a kill from a crash:

- the kill path of the waiting task process (``on_kill``, which Airflow calls on clear, mark-failed, timeout or a
  graceful worker shutdown, never on a crash) writes :data:`KILL_MARKER` into the job's staging directory *before* it
  asks the master to kill the driver, and the next try only starts once that process has ended;
- a try that handed the driver to the trigger (``deferred``) and whose task was killed meanwhile has its driver killed
  by the trigger's ``on_kill`` in the triggerer, with no ordering against the next try. So a later try never adopts a
  driver an earlier try deferred with ``cancel_on_kill``: that try either came back through the trigger's event (the
  driver had ended) or was killed, cleared or failed by its trigger (the driver is being killed). A triggerer crash
  moves the trigger to another triggerer within the same try, so it is not affected.

Either way the new try submits a fresh job and first kills the earlier driver if it still runs
(:meth:`~airflow_provider_horovod.standalone.hook.HorovodStandaloneHook.kill_earlier_tries`). Records persisted before
these fields existed are read as before (reattach to an active driver).

Client deploy mode cannot reattach: the driver lives in the task's own process and dies with it. The job methods
themselves are :class:`~airflow_provider_horovod.operators.modes.cluster.ClusterMode`'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow_provider_horovod.clients.spark_master_models import DRIVER_ACTIVE_STATES
from airflow_provider_horovod.exceptions import HorovodJobError

NOT_FOUND = "NOT_FOUND"
"""The status reported for a driver id the master does not know (restarted master, a cleaned-up cluster)."""
ABANDONED = "ABANDONED"
"""The status reported for a driver that is still active but that an earlier try gave up (:func:`abandoned_by`): its
kill is under way, so a new job is submitted rather than reconnecting to it."""
KILL_MARKER = "killed.json"
"""Written into a job's staging directory by the task's kill path before it kills the driver."""
REATTACHABLE_STATES = frozenset(DRIVER_ACTIVE_STATES) | {"UNKNOWN"}
"""Standalone driver states a retry waits on instead of resubmitting."""
SUCCEEDED_STATES = frozenset({"FINISHED"})
"""The only standalone driver state that counts as success (KILLED and ERROR never do)."""


def cluster_job(external_id: Any) -> dict[str, str]:
    """
    Check a persisted external id.

    :param external_id: the record read from the task state store.
    :return: ``{"submission_id", "staging", "artifact_dir"}`` as strings.
    :raises HorovodJobError: it is not the ``{"submission_id", "staging", "artifact_dir"}`` this operator stores.
    """
    if not isinstance(external_id, dict) or not {"submission_id", "staging", "artifact_dir"} <= set(external_id):
        raise HorovodJobError(f"unexpected cluster job record in the task state store: {external_id!r}")
    return {k: str(external_id[k]) for k in ("submission_id", "staging", "artifact_dir")}


def job_record(
    *, submission_id: str, staging: str, artifact_dir: str, try_number: int, deferred: bool, cancel_on_kill: bool
) -> dict[str, Any]:
    """
    The record a try persists right after submitting (the job's external id).

    :param submission_id: the standalone driver id.
    :param staging: the staging directory's record (with its connection id).
    :param artifact_dir: where the ranks write.
    :param try_number: the try that submitted the driver.
    :param deferred: whether that try hands the driver to the trigger (``deferrable=True``).
    :param cancel_on_kill: whether killing that try kills the driver.
    :return: a JSON-serializable dict that :func:`cluster_job` and :func:`abandoned_by` read.
    """
    return {
        "submission_id": submission_id,
        "staging": staging,
        "artifact_dir": artifact_dir,
        "try_number": try_number,
        "deferred": deferred,
        "cancel_on_kill": cancel_on_kill,
    }


def abandoned_by(record: Mapping[str, Any], *, current_try: int, kill_recorded: bool) -> str | None:
    """
    Why an earlier try's still-active driver must not be adopted, or ``None`` when it may be (a crash).

    See the module docstring for the two signals.

    :param record: the persisted record (older records without ``try_number``/``deferred`` give ``None``).
    :param current_try: the try number that reads the record.
    :param kill_recorded: whether :data:`KILL_MARKER` is in the job's staging directory.
    :return: the reason, for the log, or ``None``.
    """
    if kill_recorded:
        return "the task that waited for it was killed (cleared, marked failed, timed out or stopped) and is killing it"
    submitted_try = record.get("try_number")
    if (
        record.get("deferred") is True
        and record.get("cancel_on_kill", True) is True
        and isinstance(submitted_try, int)
        and submitted_try < current_try
    ):
        return (
            f"try {submitted_try} handed it to the trigger and ended without its result (cleared, marked failed, "
            "or its trigger failed), so the trigger's on_kill is killing it"
        )
    return None


class DurableClusterJob:
    """
    What the standalone driver's states mean to ``ResumableJobMixin``: wait for it, take its result, or resubmit.

    The base of :class:`~airflow_provider_horovod.operators.modes.cluster.ClusterMode`, which submits, waits and
    reads the result; this part does no I/O and needs no operator.
    """

    external_id_key = "horovod_cluster_job"
    """Task-state-store key of the persisted job (renaming it breaks in-flight retries)."""

    def is_job_active(self, status: str) -> bool:
        """
        SUBMITTED, RUNNING, RELAUNCHING or UNKNOWN: wait for this driver.

        :param status: a driver state, or ``NOT_FOUND``.
        """
        return status in REATTACHABLE_STATES

    def is_job_succeeded(self, status: str) -> bool:
        """
        FINISHED only (KILLED and ERROR are never success).

        :param status: a driver state, or ``NOT_FOUND``.
        """
        return status in SUCCEEDED_STATES
