"""
:class:`TrainingJob`: what one try of a training task runs, built once by the operator (or decorator) when its
arguments are rendered, and handed as it is to its deploy mode and the mode's hook (the Databricks hook's
``submit_run(json)`` shape: the hook keeps the connection, the job comes with the call).

The job's environment has one home, :attr:`TrainingJob.env`: ``env_vars``, the storage connection's credentials and,
once the try's observers have added theirs (an MLflow run's), everything the Spark driver and every rank get.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from airflow_provider_horovod.runtime.settings import JobSettings
from airflow_provider_horovod.utils.spark_auth import check_no_auth_secret

__all__ = ["TrainingJob"]


@dataclass(frozen=True)
class TrainingJob:
    """
    One try's training job. Frozen: a step that adds to it (an observer's environment, OpenLineage's Spark
    properties) makes a new one with :meth:`with_env` / :meth:`with_conf`.

    :param key: the payload's HMAC key (made for this try; it reaches the driver through its environment only).
    :param payload: the signed payload (the callable and its arguments).
    :param settings: the job's knobs, ``np``, ``checkpoint_dir`` and ``try_number`` included.
    :param artifact_dir: path or URI where the ranks write.
    :param env: environment variables for the Spark driver and every rank.
    :param conf: the application's Spark properties (the operator's ``conf``, plus what observers add).
    :param app_name: the Spark application's name.
    :param label: ``dag_id.task_id``, for names and logs.
    :param has_storage_credentials: ``artifact_dir`` / ``checkpoint_dir`` name a connection whose credentials
        travel in ``env`` (never in ``conf``, arguments, logs or XCom).
    :raises ValueError: ``conf`` or ``env`` holds the Spark RPC secret (it comes from the Spark connection's
        ``spark.authenticate.secret`` extra or this machine's ``spark-defaults.conf``, never from DAG code).
    """

    key: bytes
    payload: bytes
    settings: JobSettings
    artifact_dir: str
    env: Mapping[str, str] = field(default_factory=dict)
    conf: Mapping[str, Any] = field(default_factory=dict)
    app_name: str = "airflow-horovod"
    label: str = ""
    has_storage_credentials: bool = False

    def __post_init__(self) -> None:
        check_no_auth_secret(self.conf, self.env)

    @property
    def np(self) -> int:
        """The number of ranks as given (``< 0``: processes on the Spark driver)."""
        return self.settings.np

    @property
    def checkpoint_dir(self) -> str | None:
        """The task instance's checkpoint directory (the same for every try)."""
        return self.settings.checkpoint_dir

    def with_env(self, extra: Mapping[str, str]) -> TrainingJob:
        """
        This job with ``extra`` added to its environment (``extra`` wins).

        :param extra: variables to add, all strings.
        """
        return dataclasses.replace(self, env={**self.env, **extra})

    def with_conf(self, conf: Mapping[str, Any]) -> TrainingJob:
        """
        This job with other Spark properties.

        :param conf: the whole new set of properties.
        """
        return dataclasses.replace(self, conf=dict(conf))
