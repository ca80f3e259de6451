"""
MLflow on the Spark driver: the ``report()`` metrics logged into the job's MLflow run, and the environment that
points every rank at a run (:func:`run_env`, for a plain :class:`~airflow_provider_horovod.runtime.runner.HorovodRunner`).

The run is named by the standard MLflow variables in the job's environment (``MLFLOW_TRACKING_URI``,
``MLFLOW_RUN_ID``, ``MLFLOW_EXPERIMENT_ID``, and the credentials ``MLFLOW_TRACKING_USERNAME`` / ``_PASSWORD`` /
``_TOKEN``): the operator creates the run and sets them (docs/mlflow.md). The sink runs where the
:class:`~airflow_provider_horovod.runtime.driver.metrics.MetricsCollector` runs, which is wherever the driver of the
barrier stage is: the spark-submit driver (client and cluster mode) or the Airflow task (Spark Connect).
``mlflow`` (``mlflow-skinny`` is enough) is imported only when a run is named.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any

ENV_TRACKING_URI = "MLFLOW_TRACKING_URI"
ENV_RUN_ID = "MLFLOW_RUN_ID"
ENV_EXPERIMENT_ID = "MLFLOW_EXPERIMENT_ID"
CREDENTIAL_ENV = ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_TOKEN",
                  "MLFLOW_TRACKING_INSECURE_TLS", "MLFLOW_TRACKING_SERVER_CERT_PATH")
"""The variables MLflow's REST client reads its credentials and TLS settings from (never logged, never in XCom)."""
REQUEST_ENV = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2", "MLFLOW_HTTP_REQUEST_TIMEOUT": "20"}
"""Bounds for the driver's requests (MLflow's defaults retry for minutes): set unless the environment sets them."""
MAX_BATCH = 1000
"""MLflow's ``log_batch`` takes at most 1000 metrics per call."""


INSTALL_HINT = "pip install 'airflow-provider-horovod[mlflow]'"
"""How to get the client (``mlflow-skinny``), where Airflow runs and where the ranks run."""


def check_mlflow_installed(parameter: str) -> None:
    """
    :param parameter: the argument that asks for MLflow, for the message.
    :raises ValueError: ``mlflow`` cannot be imported; the message gives :data:`INSTALL_HINT`.
    """
    import importlib.util

    if importlib.util.find_spec("mlflow") is None:
        raise ValueError(f"{parameter} needs the MLflow client, which is not installed: {INSTALL_HINT} (mlflow-skinny; "
                         "on the Spark driver and executors too)")


def run_env(run_id: str | None = None) -> dict[str, str]:
    """
    The environment that makes every rank (``mlflow.start_run()``, autologging) and the driver's metrics log into
    one run, with this process's tracking URI and credentials, as Databricks users pass the notebook's run to
    ``HorovodRunner``.

    :param run_id: the run; ``None``: the active run (``mlflow.active_run()``).
    :return: ``MLFLOW_TRACKING_URI``, ``MLFLOW_RUN_ID``, ``MLFLOW_EXPERIMENT_ID`` and the credential variables set
        in this process.
    :raises ValueError: ``run_id`` is ``None`` and no run is active.
    :raises ImportError: ``mlflow`` is not installed.
    """
    import mlflow

    if run_id is None:
        active = mlflow.active_run()
        if active is None:
            raise ValueError("mlflow_run=True needs an active MLflow run (mlflow.start_run()), or pass its run id")
        run_id = active.info.run_id
    run = mlflow.MlflowClient().get_run(run_id)
    env = {ENV_TRACKING_URI: mlflow.get_tracking_uri(), ENV_RUN_ID: run_id, ENV_EXPERIMENT_ID: run.info.experiment_id}
    return {**env, **{name: os.environ[name] for name in CREDENTIAL_ENV if name in os.environ}}


class MlflowMetricsSink:
    """
    Logs rank 0's ``report()`` records into an MLflow run: each metric at the record's step and time
    (``MlflowClient.log_batch``), called from the collector's own thread, never from the training. The first
    failure is reported once on stderr and ends the logging; it never fails the job.

    :param env: the job's environment; :data:`ENV_RUN_ID` names the run, :data:`ENV_TRACKING_URI` the server.
    """

    def __init__(self, env: Mapping[str, str]) -> None:
        self.run_id = env[ENV_RUN_ID]
        self.tracking_uri = env.get(ENV_TRACKING_URI)
        self._env = {name: env[name] for name in CREDENTIAL_ENV if name in env}
        self._client: Any = None
        self.failed = False
        self.logged = 0
        """Metric values logged so far."""

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> MlflowMetricsSink | None:
        """
        A sink for the run ``env`` names, or ``None`` when it names none.

        :param env: the job's environment.
        """
        return cls(env) if env.get(ENV_RUN_ID) else None

    def _get_client(self) -> Any:
        if self._client is None:
            for name, value in {**REQUEST_ENV, **self._env}.items():
                os.environ.setdefault(name, value)  # MLflow's REST client reads credentials from the environment
            from mlflow import MlflowClient

            self._client = MlflowClient(tracking_uri=self.tracking_uri)
        return self._client

    def log(self, records: list[dict[str, Any]]) -> None:
        """
        Log the metrics of rank 0's ``records`` (``{"time", "step", "metrics"}``); ``None`` values (NaN) are skipped.

        :param records: records not logged yet, oldest first.
        """
        if self.failed or not records:
            return
        try:
            from mlflow.entities import Metric

            metrics = [Metric(str(key), float(value), int(float(rec.get("time") or 0) * 1000), rec.get("step") or 0)
                       for rec in records for key, value in (rec.get("metrics") or {}).items() if value is not None]
            client = self._get_client()
            for start in range(0, len(metrics), MAX_BATCH):
                client.log_batch(self.run_id, metrics=metrics[start:start + MAX_BATCH], synchronous=True)
            self.logged += len(metrics)
        except Exception as err:  # noqa: BLE001 - the metrics never fail the training
            self.failed = True
            sys.stderr.write(f"airflow-provider-horovod: cannot log the metrics to MLflow run {self.run_id}: "
                             f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}; "
                             "not logging them there any more\n")
