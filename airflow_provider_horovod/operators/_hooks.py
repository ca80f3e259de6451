"""
The hooks a ``HorovodRunnerOperator`` try runs with, made on first use (never in ``__init__``) from the operator's
rendered arguments and the credentials its ``artifact_dir`` adds: mixed into the operator, as
:class:`~airflow_provider_horovod.operators.modes.base.DelegatesToDeployMode` is.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any

from airflow_provider_horovod.exceptions import HorovodJobError
from airflow_provider_horovod.hooks.connect import HorovodConnectHook
from airflow_provider_horovod.hooks.horovod import HorovodHook
from airflow_provider_horovod.hooks.standalone import HorovodStandaloneHook

__all__ = ["OperatorHooks"]


class OperatorHooks:
    """
    The client-mode, standalone cluster-mode and Spark Connect hooks of the operator this is mixed into, built from
    its ``conn_id``, ``np``, ``conf``, ``env_vars``, ``spark_name`` and ``spark_submit_kwargs``.
    """

    conn_id: str | None
    np: int
    conf: dict[str, Any]
    env_vars: dict[str, str]
    spark_name: str | None
    spark_submit_kwargs: dict[str, Any]
    dag_id: str
    task_id: str

    @cached_property
    def hook(self) -> HorovodHook:
        """The client-mode hook for this task (created on first use, never in ``__init__``)."""
        return HorovodHook(
            conn_id=self.conn_id, np=self.np, conf=self.conf,
            env_vars=self._job_env(),
            name=self.spark_name or f"airflow-horovod-{self.dag_id}-{self.task_id}",
            spark_submit_kwargs=self.spark_submit_kwargs,
        )

    @cached_property
    def cluster_hook(self) -> HorovodStandaloneHook:
        """
        The standalone cluster-mode hook for this task (created on first use).

        :raises HorovodJobError: ``conn_id`` is ``None`` (cluster mode needs a standalone master's connection).
        """
        if self.conn_id is None:
            raise HorovodJobError("deploy_mode='cluster' needs conn_id naming a spark://host:port standalone master")
        return HorovodStandaloneHook(conn_id=self.conn_id, np=self.np, conf=self.conf,
                                     env_vars=self._job_env(),
                                     name=self.spark_name or f"airflow-horovod-{self.dag_id}-{self.task_id}")

    @cached_property
    def connect_hook(self) -> HorovodConnectHook:
        """The Spark Connect hook for this task (created on first use)."""
        return HorovodConnectHook(conn_id=self.conn_id or HorovodConnectHook.default_conn_name, np=self.np)

    def _job_env(self) -> dict[str, str]:
        """``env_vars`` plus what the job adds for the driver and ranks: artifact_dir's credentials."""
        return {**getattr(self, "_storage_env", {}), **self.env_vars}
