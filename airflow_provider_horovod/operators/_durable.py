"""
Cluster deploy mode as a resumable job: the methods Airflow's ``ResumableJobMixin`` asks of the operator.

With ``durable=True`` (the default, as on the Spark provider's ``SparkSubmitOperator``; Airflow 3.3+) the operator
persists ``{"submission_id", "staging", "artifact_dir"}`` of the standalone driver to the task state store right after
submitting, before it waits. When the Airflow task process dies mid-training (worker crash, SIGKILL, node loss), the
retry reads it back and asks the master:

- the driver is still active (SUBMITTED, RUNNING, RELAUNCHING, or UNKNOWN: the master lost its worker for now and
  may relaunch it) -> wait for that driver (no second driver is submitted), in sync or deferrable mode;
- it FINISHED -> read its result: the same XComs as a normal success, the first submission's artifact directory;
- it FAILED, was KILLED or ended in ERROR (never success), or the master no longer knows it -> submit afresh.

Client deploy mode cannot reattach: the driver lives in the task's own process and dies with it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow_provider_horovod.clients.spark_master_models import DRIVER_ACTIVE_STATES
from airflow_provider_horovod.exceptions import HorovodJobError

if TYPE_CHECKING:
    from airflow.sdk import Context

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
    ``ResumableJobMixin``'s job methods for standalone cluster deploy mode, mixed into ``HorovodRunnerOperator``.

    ``execute`` prepares ``self._prepared = (key, payload, artifact_dir)`` and calls ``execute_resumable``.
    """

    external_id_key = "horovod_cluster_job"
    """Task-state-store key of the persisted job (renaming it breaks in-flight retries)."""
    _prepared: tuple[bytes, bytes, str]

    def submit_job(self, context: Context) -> dict[str, str]:
        """
        Submit the driver (killing an earlier try's driver that still runs); return the job record to persist.

        :param context: the task's Airflow context.
        :return: ``{"submission_id", "staging", "artifact_dir"}``.
        """
        from airflow_provider_horovod.hooks.staging import Staging
        from airflow_provider_horovod.operators.horovod import XCOM_SUBMISSION_ID, default_staging_dir

        key, payload, artifact_dir = self._prepared
        staging = Staging(self.staging_dir or default_staging_dir(context))
        self.cluster_hook.kill_earlier_tries(staging)
        submission_id = self.cluster_hook.submit(
            staging=staging, payload=payload, key=key, artifact_dir=artifact_dir,
            driver_log_verbosity=self.driver_log_verbosity, extra_args=self._timeout_args(),
        )
        context["ti"].xcom_push(key=XCOM_SUBMISSION_ID, value=submission_id)
        return {"submission_id": submission_id, "staging": staging.record, "artifact_dir": artifact_dir}

    def get_job_status(self, external_id: Any, context: Context) -> str:
        """
        The driver's standalone state (``NOT_FOUND`` when the master does not know it).

        :param external_id: the record from :meth:`submit_job`.
        :param context: the task's Airflow context.
        """
        status = self.cluster_hook.status(cluster_job(external_id)["submission_id"])
        return status.driver_state or NOT_FOUND

    def is_job_active(self, status: str) -> bool:
        """
        SUBMITTED, RUNNING, RELAUNCHING or UNKNOWN: wait for this driver.

        :param status: a state from :meth:`get_job_status`.
        """
        return status in REATTACHABLE_STATES

    def is_job_succeeded(self, status: str) -> bool:
        """
        FINISHED only (KILLED and ERROR are never success).

        :param status: a state from :meth:`get_job_status`.
        """
        return status in SUCCEEDED_STATES

    def _adopt(self, job: dict[str, str], context: Context) -> None:
        from airflow_provider_horovod.operators.horovod import XCOM_ARTIFACT_DIR, XCOM_SUBMISSION_ID

        self._submission_id = job["submission_id"]
        ti = context["ti"]
        ti.xcom_push(key=XCOM_SUBMISSION_ID, value=job["submission_id"])
        ti.xcom_push(key=XCOM_ARTIFACT_DIR, value=job["artifact_dir"])  # the job's, not this try's

    def poll_until_complete(self, external_id: Any, context: Context) -> Any:
        """
        Wait for the driver (or defer to the trigger), then read the result; return rank 0's value.

        ``ResumableJobMixin`` returns this method's value directly when it reattaches, so it returns the result.

        :param external_id: the record from :meth:`submit_job`.
        :param context: the task's Airflow context.
        :raises TaskDeferred: with ``deferrable=True`` (the trigger waits; :meth:`execute_complete` resumes).
        :raises HorovodJobError: the driver failed or a rank did (through ``_finish``).
        """
        from airflow_provider_horovod.hooks.staging import Staging
        from airflow_provider_horovod.hooks.standalone import HorovodStandaloneHook

        job = cluster_job(external_id)
        self._adopt(job, context)
        if self.deferrable:
            self._defer_to_trigger(job["submission_id"], job["staging"])
        staging = Staging(job["staging"])
        status = self._wait_for_driver(context["ti"], job["submission_id"], staging)
        self._job_value = self._finish(context["ti"], HorovodStandaloneHook.result(staging, status))
        return self._job_value

    def get_job_result(self, external_id: Any, context: Context) -> Any:
        """
        Rank 0's value: from the wait just done, or read from the staging directory of a driver that FINISHED.

        :param external_id: the record from :meth:`submit_job`.
        :param context: the task's Airflow context.
        """
        from airflow_provider_horovod.hooks.staging import Staging
        from airflow_provider_horovod.hooks.standalone import HorovodStandaloneHook

        if "_job_value" in self.__dict__:
            return self._job_value
        job = cluster_job(external_id)
        self._adopt(job, context)
        self.log.info("Driver %s of an earlier try already finished: reading its result", job["submission_id"])
        status = self.cluster_hook.status(job["submission_id"])
        return self._finish(context["ti"], HorovodStandaloneHook.result(Staging(job["staging"]), status))
