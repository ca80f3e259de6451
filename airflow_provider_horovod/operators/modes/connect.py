"""
Spark Connect: the barrier job runs from this task through a Spark Connect session (``HorovodConnectHook``); no
JVM runs on the Airflow worker. Like client mode it cannot reattach: the session ends with the task process.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow_provider_horovod.exceptions import HorovodJobError
from airflow_provider_horovod.operators.modes.base import DeployMode
from airflow_provider_horovod.operators.modes.client import GONE
from airflow_provider_horovod.utils.job_result import JobResult

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_provider_horovod.hooks.connect import HorovodConnectHook
    from airflow_provider_horovod.job import TrainingJob
    from airflow_provider_horovod.operators._reporting import JobReporter


class ConnectMode(DeployMode):
    """
    One Spark Connect session per try: opened, the barrier stage run, closed.

    :param request: the try's job.
    :param hook: the Spark Connect hook (:class:`~airflow_provider_horovod.hooks.connect.HorovodConnectHook`).
    :param reporter: the try's reporting steps.
    """

    name = "connect"

    def __init__(self, request: TrainingJob, hook: HorovodConnectHook, reporter: JobReporter) -> None:
        super().__init__(request, hook, reporter)
        self._result: JobResult | None = None

    def check(self) -> None:
        """
        Refuse an ``artifact_dir`` (or ``checkpoint_dir``) that carries a connection: the credentials cannot travel
        to the ranks.

        :raises HorovodJobError: one names a connection with credentials.
        """
        if self.job.has_storage_credentials:
            raise HorovodJobError(
                f"artifact_dir or checkpoint_dir with a connection (artifact_dir {self.job.artifact_dir!r}, "
                f"checkpoint_dir {self.job.settings.checkpoint_dir!r}) is supported in client and cluster "
                "deploy modes; with Spark Connect give a plain URI and configure the store's credentials on the "
                "cluster"
            )

    def submit_job(self, context: Context) -> None:
        """
        Nothing to do before the session opens (in :meth:`poll_until_complete`).

        :param context: the task's Airflow context.
        :return: ``None``: there is no job id to persist.
        """
        return None

    def get_job_status(self, external_id: Any, context: Context) -> str:
        """
        Always :data:`~airflow_provider_horovod.operators.modes.client.GONE`: the session ended with its try.

        :param external_id: unused.
        :param context: the task's Airflow context.
        """
        return GONE

    def poll_until_complete(self, external_id: Any, context: Context) -> None:
        """
        Open the session, run the barrier stage and wait for it, close the session.

        :param external_id: unused (``None``).
        :param context: the task's Airflow context.
        :raises HorovodJobError: a rank failed (naming it), or the stage could not run.
        """
        self._result = self.hook.run(self.job)

    def get_job_result(self, external_id: Any, context: Context) -> Any:
        """
        Push the XComs of the job just run and return rank 0's value.

        :param external_id: unused.
        :param context: the task's Airflow context.
        :raises HorovodResultError: the value cannot go to XCom.
        """
        if self._result is None:
            raise RuntimeError(f"the {self.name} deploy mode has no result before poll_until_complete ran the job")
        return self.reporter.finish(context["ti"], self._result)

    def on_kill(self) -> None:
        """Interrupt the session's operations (the barrier stage, and with it the ranks)."""
        self.hook.on_kill()
