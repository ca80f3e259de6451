"""
Spark Connect: the barrier job runs from this task through a Spark Connect session (``HorovodConnectHook``); no
JVM runs on the Airflow worker. Like client mode it cannot reattach: the session ends with the task process.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow_provider_horovod.exceptions import HorovodJobError
from airflow_provider_horovod.hooks.result import JobResult
from airflow_provider_horovod.operators.modes.base import DeployMode
from airflow_provider_horovod.operators.modes.client import GONE

if TYPE_CHECKING:
    from airflow.sdk import Context


class ConnectMode(DeployMode):
    """
    One Spark Connect session per try: opened, the barrier stage run, closed.

    :param operator: the operator this try runs.
    """

    name = "connect"

    def __init__(self, operator: Any) -> None:
        super().__init__(operator)
        self._result: JobResult | None = None

    def check(self, *, storage_conn_id: str | None) -> None:
        """
        Refuse an ``artifact_dir`` that carries a connection: the credentials cannot travel to the ranks.

        :param storage_conn_id: the connection of ``artifact_dir``, when it names one.
        :raises HorovodJobError: it names one with credentials.
        """
        if self.operator._storage_env:
            raise HorovodJobError(
                f"artifact_dir with a connection ({storage_conn_id!r}) is supported in client and cluster deploy "
                "modes; with Spark Connect give a plain URI and configure the store's credentials on the cluster")

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
        op = self.operator
        _key, payload, artifact_dir = op._prepared
        self._result = op.connect_hook.run(
            payload=payload, artifact_dir=artifact_dir, name=f"{op.dag_id}.{op.task_id}",
            settings=op.job_settings(), env=op._job_env(),
        )

    def get_job_result(self, external_id: Any, context: Context) -> Any:
        """
        Push the XComs of the job just run and return rank 0's value.

        :param external_id: unused.
        :param context: the task's Airflow context.
        :raises HorovodResultError: the value cannot go to XCom.
        """
        return self.operator._finish(context["ti"], self._result)

    def on_kill(self) -> None:
        """Interrupt the session's operations (the barrier stage, and with it the ranks)."""
        if "connect_hook" in self.operator.__dict__:
            self.operator.connect_hook.on_kill()
