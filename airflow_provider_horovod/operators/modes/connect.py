"""
Spark Connect: the barrier job runs from this task through a Spark Connect session (``HorovodConnectHook``); no
JVM runs on the Airflow worker. Like client mode it cannot reattach: the session ends with the task process.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow_provider_horovod.exceptions import HorovodJobError
from airflow_provider_horovod.operators.modes.base import SynchronousMode

if TYPE_CHECKING:
    from airflow.sdk import Context


class ConnectMode(SynchronousMode):
    """
    One Spark Connect session per try: opened, the barrier stage run, closed.

    :param request: the try's job.
    :param hook: the Spark Connect hook (:class:`~airflow_provider_horovod.hooks.connect.HorovodConnectHook`).
    :param reporter: the try's reporting steps.
    """

    name = "connect"

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

    def poll_until_complete(self, external_id: Any, context: Context) -> None:
        """
        Open the session, run the barrier stage and wait for it, close the session.

        :param external_id: unused (``None``).
        :param context: the task's Airflow context.
        :raises HorovodJobError: a rank failed (naming it), or the stage could not run.
        """
        self._result = self.hook.run(self.job)
