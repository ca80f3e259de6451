"""
Cluster deploy mode as a resumable job: what the persisted record and each standalone driver state mean.

With ``durable=True`` (the default, as on the Spark provider's ``SparkSubmitOperator``; Airflow 3.3+) the operator
persists ``{"submission_id", "staging", "artifact_dir"}`` of the standalone driver to the task state store right after
submitting, before it waits. When the Airflow task process dies mid-training (worker crash, SIGKILL, node loss), the
retry reads it back and asks the master:

- the driver is still active (SUBMITTED, RUNNING, RELAUNCHING, or UNKNOWN: the master lost its worker for now and
  may relaunch it) -> wait for that driver (no second driver is submitted), in sync or deferrable mode;
- it FINISHED -> read its result: the same XComs as a normal success, the first submission's artifact directory;
- it FAILED, was KILLED or ended in ERROR (never success), or the master no longer knows it -> submit afresh.

Client deploy mode cannot reattach: the driver lives in the task's own process and dies with it. The job methods
themselves are :class:`~airflow_provider_horovod.operators.modes.cluster.ClusterMode`'s.
"""

from __future__ import annotations

from typing import Any

from airflow_provider_horovod.clients.spark_master_models import DRIVER_ACTIVE_STATES
from airflow_provider_horovod.exceptions import HorovodJobError

NOT_FOUND = "NOT_FOUND"
"""The status reported for a driver id the master does not know (restarted master, a cleaned-up cluster)."""
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
