"""
The hooks a ``HorovodRunnerOperator`` try runs with, made on first use (never in ``__init__``) from the operator's
rendered arguments and the credentials its ``artifact_dir`` / ``checkpoint_dir`` add: mixed into the operator, as
:class:`~airflow_provider_horovod.operators.modes.base.DelegatesToDeployMode` is.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any

from airflow_provider_horovod.exceptions import HorovodJobError
from airflow_provider_horovod.hooks.connect import HorovodConnectHook
from airflow_provider_horovod.hooks.horovod import HorovodHook
from airflow_provider_horovod.operators.common import default_artifact_dir, default_checkpoint_dir
from airflow_provider_horovod.runtime.launchers import get_launcher
from airflow_provider_horovod.standalone.hook import HorovodStandaloneHook
from airflow_provider_horovod.utils.storage import credentials_env, shared_conn_id, storage_location

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
    artifact_dir: Any
    checkpoint_dir: Any
    spark_name: str | None
    spark_submit_kwargs: dict[str, Any]
    dag_id: str
    task_id: str
    launcher: str

    def _default_spark_name(self) -> str:
        """``airflow-<launcher>-<dag>-<task>`` (``airflow-horovod-...``, ``airflow-torch-...``): the Spark UI's list of
        applications says which launcher a job uses."""
        return f"airflow-{get_launcher(self.launcher).name}-{self.dag_id}-{self.task_id}"

    @cached_property
    def hook(self) -> HorovodHook:
        """The client-mode hook for this task (created on first use, never in ``__init__``)."""
        return HorovodHook(
            conn_id=self.conn_id, np=self.np, conf=self.conf,
            env_vars=self._job_env(),
            name=self.spark_name or self._default_spark_name(),
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
                                     name=self.spark_name or self._default_spark_name())

    @cached_property
    def connect_hook(self) -> HorovodConnectHook:
        """The Spark Connect hook for this task (created on first use)."""
        return HorovodConnectHook(conn_id=self.conn_id or HorovodConnectHook.default_conn_name, np=self.np)

    def _storage_locations(self, context: Any) -> tuple[str, str]:
        """
        This try's artifact directory and the task instance's checkpoint directory (the operator's arguments, else
        the defaults), as plain URIs for the ranks: an ``ObjectStoragePath`` or ``s3://conn_id@bucket/x`` names a
        connection, whose credentials :meth:`_job_env` then adds as ``AWS_*`` variables that travel like
        ``env_vars`` (never in conf, arguments, logs or XCom).

        :param context: the task's Airflow context.
        :return: ``(artifact_dir, checkpoint_dir)``.
        :raises ValueError: the two name different connections, or one of a type with no credentials for the ranks.
        """
        artifact_dir, artifact_conn_id = storage_location(self.artifact_dir or default_artifact_dir(context))
        checkpoint_dir, checkpoint_conn_id = storage_location(self.checkpoint_dir or default_checkpoint_dir(context))
        conn_id = shared_conn_id(artifact_dir=artifact_conn_id, checkpoint_dir=checkpoint_conn_id)
        self._storage_env = credentials_env(conn_id) if conn_id else {}
        return artifact_dir, checkpoint_dir

    def _job_env(self) -> dict[str, str]:
        """``env_vars`` plus what the job adds for the driver and ranks: the storage connection's credentials."""
        return {**getattr(self, "_storage_env", {}), **self.env_vars}
