"""
Client deploy mode: the Spark driver runs inside the Airflow task, spark-submitted by ``HorovodHook`` (the Spark
provider's ``SparkSubmitHook``). It cannot reattach after the task process dies: the driver dies with it.
"""

from __future__ import annotations

import os
import tempfile
from typing import TYPE_CHECKING

from airflow_provider_horovod.operators.modes.base import SynchronousMode
from airflow_provider_horovod.runtime.driver.program import PAYLOAD_FILE
from airflow_provider_horovod.utils.job_result import cleanup_staging

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_provider_horovod.hooks.horovod import HorovodHook
    from airflow_provider_horovod.job import TrainingJob
    from airflow_provider_horovod.operators._reporting import JobReporter
    from airflow_provider_horovod.utils.stage_progress import ProgressWatcher


class ClientMode(SynchronousMode):
    """
    spark-submit in client mode from this task; the job's id is the local staging directory of the payload.

    :param request: the try's job.
    :param hook: the client-mode hook (:class:`~airflow_provider_horovod.hooks.horovod.HorovodHook`).
    :param reporter: the try's reporting steps.
    :param deferrable: the operator's ``deferrable``: client mode cannot defer, and says so.
    """

    name = "client"

    def __init__(
        self, request: TrainingJob, hook: HorovodHook, reporter: JobReporter, *, deferrable: bool = False
    ) -> None:
        super().__init__(request, hook, reporter)
        self.deferrable = deferrable

    def submit_job(self, context: Context) -> str:
        """
        Write the payload into a new private staging directory (mode 0700, the file 0600).

        :param context: the task's Airflow context.
        :return: the staging directory (removed by :meth:`poll_until_complete`).
        :raises OSError: the directory or file cannot be written.
        """
        if self.deferrable:
            self.log.warning(
                "deferrable=True needs deploy_mode='cluster' (in client mode the Spark driver "
                "runs in this task's process); running synchronously"
            )
        staging = tempfile.mkdtemp(prefix="horovod-airflow-")  # mode 0700
        try:
            fd = os.open(os.path.join(staging, PAYLOAD_FILE), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(self.job.payload)
        except BaseException:
            cleanup_staging(staging)
            raise
        return staging

    def poll_until_complete(self, external_id: str, context: Context) -> None:
        """
        Run spark-submit and wait for it, logging the application's progress; remove the staging directory.

        :param external_id: the staging directory from :meth:`submit_job`.
        :param context: the task's Airflow context.
        :raises HorovodJobError: the master is unreachable, the job or a rank failed.
        """
        ti, job = context["ti"], self.job
        watchers: list[ProgressWatcher] = []

        def on_app_started(app_id: str, ui_url: str | None) -> None:
            if (watcher := self.reporter.app_started(ti, app_id, ui_url)) is not None:
                watchers.append(watcher)

        try:
            self._result = self.hook.run_job(
                job,
                payload_path=os.path.join(external_id, PAYLOAD_FILE),
                staging_dir=external_id,
                on_app_started=on_app_started,
            )
        finally:
            for watcher in watchers:
                watcher.stop()
            cleanup_staging(external_id)
            self.reporter.link_history(ti)
