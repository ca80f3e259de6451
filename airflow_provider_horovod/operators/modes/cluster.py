"""
Standalone cluster deploy mode: the Spark driver runs on a Spark standalone worker, submitted through the master's
REST submission server or spark-submit's legacy gateway (``HorovodStandaloneHook``). The task waits for it in-process
or defers to ``HorovodSparkJobTrigger``; with ``durable=True`` a retry reattaches to it
(:mod:`airflow_provider_horovod.standalone.durable` says which driver state means what).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_provider_horovod.operators.modes.base import DeployMode
from airflow_provider_horovod.paths import default_staging_dir
from airflow_provider_horovod.standalone.durable import (
    ABANDONED,
    KILL_MARKER,
    NOT_FOUND,
    REATTACHABLE_STATES,
    DurableClusterJob,
    abandoned_by,
    cluster_job,
    job_record,
)
from airflow_provider_horovod.standalone.hook import HorovodStandaloneHook
from airflow_provider_horovod.standalone.poll import (
    SUCCESS,
    ProgressLog,
    driver_failure,
    read_app,
    read_poll,
    read_progress,
    read_result,
    validate_event,
)
from airflow_provider_horovod.standalone.slots import ClusterSlotsWatcher
from airflow_provider_horovod.triggers.horovod import HorovodSparkJobTrigger
from airflow_provider_horovod.utils.job_result import Kill, read_job_result
from airflow_provider_horovod.utils.staging import Staging
from airflow_provider_horovod.xcom_keys import (
    XCOM_ARTIFACT_DIR,
    XCOM_SPARK_APP_ID,
    XCOM_SPARK_UI_URL,
    XCOM_SUBMISSION_ID,
)

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_provider_horovod.clients import DriverStatus
    from airflow_provider_horovod.job import TrainingJob
    from airflow_provider_horovod.operators._reporting import JobReporter


@dataclass(frozen=True)
class ClusterOptions:
    """
    How cluster mode waits for its driver: the operator's arguments that only this mode uses.

    :param defer: the operator's ``defer`` (``trigger=``, ``method_name=``); called with ``deferrable``.
    :param deferrable: hand the wait to :class:`~airflow_provider_horovod.triggers.horovod.HorovodSparkJobTrigger`.
    :param cancel_on_kill: kill the driver when the task is killed.
    :param poll_interval_s: seconds between polls of the driver's state and the cluster's slots (``None``: 5 s, no
        slot or progress polling).
    :param staging_dir: the rendered ``staging_dir``, or ``None`` for :func:`default_staging_dir`.
    """

    defer: Callable[..., Any] | None = None
    deferrable: bool = False
    cancel_on_kill: bool = True
    poll_interval_s: float | None = 5.0
    staging_dir: str | None = None


class ClusterMode(DurableClusterJob, DeployMode):
    """
    Submit the driver to the standalone master, wait for it (or defer), read its result from the staging directory.

    The job's id, persisted by ``ResumableJobMixin``, is the record of
    :func:`~airflow_provider_horovod.standalone.durable.job_record`.

    :param request: the try's job (``None`` when the mode only resumes after the trigger).
    :param hook: the standalone hook (:class:`~airflow_provider_horovod.standalone.hook.HorovodStandaloneHook`).
    :param reporter: the try's reporting steps.
    :param options: how it waits.
    """

    name = "cluster"
    resumable = True

    def __init__(
        self,
        request: TrainingJob | None,
        hook: HorovodStandaloneHook,
        reporter: JobReporter,
        options: ClusterOptions | None = None,
    ) -> None:
        DeployMode.__init__(self, request, hook, reporter)
        self.options = options or ClusterOptions()
        self.submission_id: str | None = None
        """The driver this try submitted or adopted (the one ``on_kill`` kills)."""
        self._job_value: Any = None
        self._has_value = False
        self._staging: str | None = None
        """The staging record of the driver this try submitted or adopted (where ``on_kill`` records its kill)."""
        self._killing = False
        """Set by :meth:`on_kill`: a KILLED driver is this task's own doing, not a kill from outside."""

    def submit_job(self, context: Context) -> dict[str, str]:
        """
        Submit the driver (killing an earlier try's driver that still runs); return the job record to persist.

        :param context: the task's Airflow context.
        :return: ``{"submission_id", "staging", "artifact_dir"}``.
        :raises HorovodJobError: the master is unreachable, the job can never fit, or the submission was refused.
        """
        job, options = self.job, self.options
        staging = Staging(options.staging_dir or default_staging_dir(context))
        self.hook.kill_earlier_tries(staging)
        submission_id = self.hook.submit(job, staging=staging)
        context["ti"].xcom_push(key=XCOM_SUBMISSION_ID, value=submission_id)
        return job_record(
            submission_id=submission_id,
            staging=staging.record,
            artifact_dir=job.artifact_dir,
            try_number=context["ti"].try_number,
            deferred=options.deferrable,
            cancel_on_kill=options.cancel_on_kill,
        )

    def get_job_status(self, external_id: Any, context: Context) -> str:
        """
        The driver's standalone state (``NOT_FOUND`` when the master does not know it), or ``ABANDONED`` for an
        active driver that an earlier try gave up (its kill is under way:
        :func:`~airflow_provider_horovod.standalone.durable.abandoned_by`).

        :param external_id: the record from :meth:`submit_job`.
        :param context: the task's Airflow context.
        :raises HorovodJobError: the record is not one this operator stores.
        """
        job = cluster_job(external_id)
        state = self.hook.status(job["submission_id"]).driver_state or NOT_FOUND
        if state not in REATTACHABLE_STATES:
            return state
        reason = abandoned_by(
            external_id,
            current_try=context["ti"].try_number,
            kill_recorded=Staging(job["staging"]).read_bytes(KILL_MARKER) is not None,
        )
        if reason is None:
            return state
        self.log.warning(
            "Driver %s is %s, but %s: not reconnecting to it; submitting a new job", job["submission_id"], state, reason
        )
        return ABANDONED

    def _adopt(self, job: dict[str, str], context: Context) -> None:
        """Make ``job`` this try's: its driver is the one ``on_kill`` kills, its artifact directory the one reported."""
        self.submission_id = job["submission_id"]
        self._staging = job["staging"]
        ti = context["ti"]
        ti.xcom_push(key=XCOM_SUBMISSION_ID, value=job["submission_id"])
        ti.xcom_push(key=XCOM_ARTIFACT_DIR, value=job["artifact_dir"])  # the job's, not this try's

    def poll_until_complete(self, external_id: Any, context: Context) -> Any:
        """
        Wait for the driver (or defer to the trigger), then read the result; return rank 0's value.

        ``ResumableJobMixin`` returns this method's value directly when it reattaches, so it returns the result.

        :param external_id: the record from :meth:`submit_job`.
        :param context: the task's Airflow context.
        :raises TaskDeferred: with ``deferrable=True`` (the trigger waits; the operator's ``execute_complete``
            resumes in :meth:`complete`).
        :raises HorovodJobError: the driver failed or a rank did.
        """
        options = self.options
        job = cluster_job(external_id)
        self._adopt(job, context)
        if options.deferrable:
            if options.defer is None:
                raise RuntimeError("deferrable cluster mode needs the operator's defer")
            options.defer(
                trigger=HorovodSparkJobTrigger(
                    submission_id=job["submission_id"],
                    rest_url=self.hook.endpoints.rest_url,
                    staging=job["staging"],
                    poll_interval_s=options.poll_interval_s or 5.0,
                    cancel_on_kill=options.cancel_on_kill,
                    conn_id=self.hook.conn_id,
                    master_ui_url=self.hook.endpoints.master_ui_url if self.hook.uses_gateway else None,
                ),
                method_name="execute_complete",
            )
        staging = Staging(job["staging"])
        status = self._wait_for_driver(context["ti"], job["submission_id"], staging)
        killed = self._kill(job["submission_id"], status.driver_state, self.reporter.spark_app_id)
        self._job_value = self.reporter.finish(context["ti"], read_result(staging, status, killed=killed))
        self._has_value = True
        return self._job_value

    def _wait_for_driver(self, ti: Any, submission_id: str, staging: Staging) -> DriverStatus:
        """
        Poll the driver's state every ``poll_interval_s`` until it ends (the decision:
        :func:`~airflow_provider_horovod.standalone.poll.read_poll`, as the trigger's), logging
        its state changes and reporting the application once it started.
        """
        interval = self.options.poll_interval_s
        poll, watcher, tick, progress = None, None, threading.Event(), ProgressLog(since=time.time())
        # what the job waits for, from the master (a mode that only resumes has no job to size it from)
        slots = (
            None
            if not interval or self.request is None
            else ClusterSlotsWatcher(
                master_ui_url=self.hook.endpoints.master_ui_url,
                submission_id=submission_id,
                app_id=lambda: read_app(staging)[0],
                np=self.request.np,
                conf=self.request.conf,
                log=self.log.info,
                poll_interval_s=interval,
                access=self.hook.access,
            ).start()
        )
        try:
            while True:
                status = self.hook.status(submission_id)
                app = poll.app if poll is not None and poll.app_id else read_app(staging)
                poll = read_poll(submission_id, status, app, poll)
                if poll.state_changed:
                    self.log.info("Driver %s is %s", submission_id, poll.driver_state)
                if poll.app_started and poll.app_id is not None:
                    watcher = self.reporter.app_started(ti, poll.app_id, poll.ui_url)
                if poll.done:
                    return status
                if line := progress.line(read_progress(staging)):
                    self.log.info("Training: %s", line)
                tick.wait(interval or 5.0)  # the poll interval
        finally:
            if watcher:
                watcher.stop()
            if slots is not None:
                slots.stop()
            self.reporter.link_history(ti)

    def get_job_result(self, external_id: Any, context: Context) -> Any:
        """
        Rank 0's value: from the wait just done, or read from the staging directory of a driver that FINISHED.

        :param external_id: the record from :meth:`submit_job`.
        :param context: the task's Airflow context.
        :raises HorovodJobError: the result cannot be read or says the job failed.
        """
        if self._has_value:
            return self._job_value
        job = cluster_job(external_id)
        self._adopt(job, context)
        self.log.info("Driver %s of an earlier try already finished: reading its result", job["submission_id"])
        status = self.hook.status(job["submission_id"])
        killed = self._kill(job["submission_id"], status.driver_state, read_app(Staging(job["staging"]))[0])
        return self.reporter.finish(context["ti"], read_result(Staging(job["staging"]), status, killed=killed))

    def complete(self, context: Context, event: dict[str, Any]) -> Any:
        """
        Resume after the trigger: validate its event, read the result, push XComs, or raise the failure.

        :param context: the task's Airflow context.
        :param event: the trigger's event payload.
        :raises ValueError: the event is malformed.
        :raises HorovodJobError: the driver or a rank failed.
        """
        ti, reporter = context["ti"], self.reporter
        event = validate_event(event)
        self.log.info("Driver %s ended %s", event["submission_id"], event["driver_state"])
        if event["app_id"]:
            ti.xcom_push(key=XCOM_SPARK_APP_ID, value=event["app_id"])
            reporter.spark_app_id = event["app_id"]
            if event["ui_url"]:
                ti.xcom_push(key=XCOM_SPARK_UI_URL, value=event["ui_url"])  # Airflow writes the link as the try ends
                reporter.spark_ui_url = event["ui_url"]
            reporter.link_history(ti)
        cause = killed = None
        if event["status"] != SUCCESS:
            cause = driver_failure(event["driver_state"], event["message"])
            killed = self._kill(event["submission_id"], event["driver_state"], event["app_id"])
        return reporter.finish(
            ti,
            read_job_result(
                Staging(event["staging"]),
                app_id=event["app_id"],
                ui_url=event["ui_url"],
                submit_error=cause,
                killed=killed,
            ),
        )

    def _kill(self, submission_id: str, driver_state: str | None, app_id: str | None) -> Kill | None:
        """
        The kill, when the driver or its application was killed (by this task's ``on_kill`` or from outside), for
        the error to say first, else ``None``.

        :param submission_id: the driver id.
        :param driver_state: its final state.
        :param app_id: its Spark application id, when it had started one.
        """
        if driver_state == "FINISHED":
            return None
        facts = {"submission_id": submission_id, "driver_state": driver_state, "app_id": app_id}
        if self._killing:
            return Kill(
                f"Spark driver {submission_id} was killed by this task (on_kill: the task was stopped, "
                f"cleared or marked failed); driver state {driver_state}",
                {**facts, "by": "this task"},
            )
        headline = self.hook.killed_from_outside(submission_id, driver_state, app_id)
        return None if headline is None else Kill(headline, {**facts, "by": "outside"})

    def kill_after_trigger_failure(self, context: Context) -> None:
        """
        The trigger failed or timed out: kill the driver this task submitted (its id is in XCom).

        :param context: the task's Airflow context.
        """
        ti = context["ti"]
        submission_id = ti.xcom_pull(task_ids=ti.task_id, key=XCOM_SUBMISSION_ID, map_indexes=ti.map_index)
        if submission_id:
            self.log.warning("The trigger failed: killing driver %s", submission_id)
            self.hook.kill(submission_id)

    def on_kill(self) -> None:
        """
        Kill the driver this try submitted or adopted, if any, after recording the kill in its staging directory
        (:data:`~airflow_provider_horovod.standalone.durable.KILL_MARKER`): the next try then submits a fresh job
        instead of reconnecting to the driver this kill takes down.
        """
        if self.submission_id is None:
            return
        self._killing = True
        if self._staging is not None:
            try:
                Staging(self._staging).write_bytes(
                    KILL_MARKER, json.dumps({"submission_id": self.submission_id, "killed_at": time.time()}).encode()
                )
            except Exception as err:  # noqa: BLE001 - the kill itself matters more than its record
                self.log.warning(
                    "Cannot record the kill of driver %s in %s: %s", self.submission_id, self._staging, err
                )
        self.hook.kill(self.submission_id)
