"""
MLflow on the Spark driver: the ``report()`` metrics logged into the job's MLflow run, and the environment that
points every rank at a run (:func:`run_env`, for a plain
:class:`~airflow_provider_horovod.runtime.driver.runner.HorovodRunner`).

The run is named by the standard MLflow variables in the job's environment (``MLFLOW_TRACKING_URI``,
``MLFLOW_RUN_ID``, ``MLFLOW_EXPERIMENT_ID``, and the credentials ``MLFLOW_TRACKING_USERNAME`` / ``_PASSWORD`` /
``_TOKEN``): the operator creates the run and sets them (docs/mlflow.md). The sink runs where the
:class:`~airflow_provider_horovod.runtime.driver.metrics.MetricsCollector` runs, which is wherever the driver of the
barrier stage is: the spark-submit driver (client and cluster mode) or the Airflow task (Spark Connect).
``mlflow`` (``mlflow-skinny`` is enough) is imported only when a run is named.
"""

from __future__ import annotations

import collections
import itertools
import os
import sys
import threading
import time
from collections.abc import Mapping
from typing import Any

ENV_TRACKING_URI = "MLFLOW_TRACKING_URI"
ENV_RUN_ID = "MLFLOW_RUN_ID"
ENV_EXPERIMENT_ID = "MLFLOW_EXPERIMENT_ID"
CREDENTIAL_ENV = (
    "MLFLOW_TRACKING_USERNAME",
    "MLFLOW_TRACKING_PASSWORD",
    "MLFLOW_TRACKING_TOKEN",
    "MLFLOW_TRACKING_INSECURE_TLS",
    "MLFLOW_TRACKING_SERVER_CERT_PATH",
)
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
        raise ValueError(
            f"{parameter} needs the MLflow client, which is not installed: {INSTALL_HINT} (mlflow-skinny; "
            "on the Spark driver and executors too)"
        )


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
    (``MlflowClient.log_batch``), from a thread of its own, never from the training nor the collector's thread.

    Outlives a tracking-server outage (a restart, a network blip; mlflow/mlflow#1760 asks for this): points that
    could not be sent stay in a buffer of at most ``buffer_points`` (the oldest go first beyond it, counted) and are
    sent again with exponential back-off (``retry_initial_s`` doubling to ``retry_max_s``); the driver's stderr says
    once that it is behind and once that it caught up. At the job's end (:meth:`close`) it keeps trying for
    ``final_wait_s``; what is still not delivered then is counted in one line. The training never fails for its
    metrics.

    :param env: the job's environment; :data:`ENV_RUN_ID` names the run, :data:`ENV_TRACKING_URI` the server.
    :param buffer_points: the most metric points kept while the server does not answer.
    :param retry_initial_s: seconds before the first retry after a failure.
    :param retry_max_s: the longest wait between two retries, seconds.
    :param final_wait_s: how long :meth:`close` keeps trying to deliver what is left, seconds.
    """

    def __init__(
        self,
        env: Mapping[str, str],
        *,
        buffer_points: int = 100_000,
        retry_initial_s: float = 1.0,
        retry_max_s: float = 30.0,
        final_wait_s: float = 30.0,
    ) -> None:
        self.run_id = env[ENV_RUN_ID]
        self.tracking_uri = env.get(ENV_TRACKING_URI)
        self._env = {name: env[name] for name in CREDENTIAL_ENV if name in env}
        self._client: Any = None
        self._retry_initial_s, self._retry_max_s = retry_initial_s, retry_max_s
        self.final_wait_s = final_wait_s
        self._buffer_points = buffer_points
        self._pending: collections.deque[Any] = collections.deque(maxlen=buffer_points)
        self._cond = threading.Condition()
        self._closing = False
        self._closed = threading.Event()
        self._deadline = 0.0
        self._thread: threading.Thread | None = None
        self.behind = False
        """The last attempt failed: points are waiting in the buffer."""
        self.failures = 0
        """Attempts that failed so far."""
        self.logged = 0
        """Metric values logged so far."""
        self.dropped = 0
        """Points the buffer had no room for (the oldest ones, during a long outage)."""

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

    @property
    def undelivered(self) -> int:
        """Points not delivered (yet): in the buffer, or dropped from it."""
        with self._cond:
            return len(self._pending) + self.dropped

    def log(self, records: list[dict[str, Any]]) -> None:
        """
        Queue the metrics of rank 0's ``records`` (``{"time", "step", "metrics"}``) for the run; ``None`` values (NaN)
        are skipped. Returns at once.

        :param records: records not logged yet, oldest first.
        """
        points = [
            (str(key), float(value), int(float(rec.get("time") or 0) * 1000), rec.get("step") or 0)
            for rec in records
            for key, value in (rec.get("metrics") or {}).items()
            if value is not None
        ]
        if not points:
            return
        with self._cond:
            self.dropped += max(0, len(points) - (self._buffer_points - len(self._pending)))
            self._pending.extend(points)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="horovod-mlflow", daemon=True)
                self._thread.start()
            self._cond.notify()

    def _send(self) -> bool | None:
        """Send what is pending, a batch at a time; whether all of it went (``None``: it never can, no client)."""
        try:
            from mlflow.entities import Metric

            client = self._get_client()
        except ImportError as err:  # not an outage: nothing to wait for
            with self._cond:
                self.dropped += len(self._pending)
                self._pending.clear()
            _say(
                f"cannot log the metrics to MLflow run {self.run_id}: {err}; the driver's Python needs the MLflow "
                f"client ({INSTALL_HINT})"
            )
            return None
        try:
            while True:
                with self._cond:
                    batch = list(itertools.islice(self._pending, MAX_BATCH))
                if not batch:
                    return True
                client.log_batch(self.run_id, metrics=[Metric(*point) for point in batch], synchronous=True)
                with self._cond:
                    for _ in batch:
                        self._pending.popleft()
                    self.logged += len(batch)
        except Exception as err:  # noqa: BLE001 - the metrics never fail the training
            self.failures += 1
            if not self.behind:
                self.behind = True
                _say(
                    f"cannot log the metrics to MLflow run {self.run_id}: {type(err).__name__}: "
                    f"{str(err).splitlines()[0] if str(err) else ''}; keeping them ({self.undelivered} points so "
                    "far) and trying again with back-off"
                )
            return False

    def _run(self) -> None:
        delay = self._retry_initial_s
        while True:
            with self._cond:
                while not self._pending and not self._closing:
                    self._cond.wait()
                if not self._pending:
                    return  # closing, and everything delivered
            sent = self._send()
            if sent is None:
                return
            if sent:
                if self.behind:
                    self.behind = False
                    _say(
                        f"MLflow run {self.run_id} caught up: the metrics kept during the outage are logged "
                        f"({self.logged} points in all)"
                    )
                delay = self._retry_initial_s
                continue
            if self._closed.is_set():
                left = self._deadline - time.monotonic()
                if left <= 0:
                    return
                time.sleep(min(delay, left))  # back-off before the next try, within the end's bound
            else:
                self._closed.wait(delay)  # back-off; close() cuts it short
            delay = min(delay * 2, self._retry_max_s)

    def close(self) -> None:
        """
        Deliver what is left, trying for at most :attr:`final_wait_s`; say how many points were not delivered.
        """
        with self._cond:
            self._closing = True
            self._deadline = time.monotonic() + self.final_wait_s
            self._closed.set()
            self._cond.notify()
            thread = self._thread
        if thread is not None:
            thread.join(self.final_wait_s + 30)  # a request under way ends within MLflow's request timeout
        left = self.undelivered
        if left:
            _say(
                f"{left} metric {'point was' if left == 1 else 'points were'} not delivered to MLflow run "
                f"{self.run_id} (the tracking server did "
                f"not take them within {self.final_wait_s:.0f} s of the job's end; {self.logged} were); the "
                "training itself is unaffected"
            )


def _say(line: str) -> None:
    sys.stderr.write(f"airflow-provider-horovod: {line}\n")
    sys.stderr.flush()
