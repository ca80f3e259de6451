"""
How ``HorovodRunnerOperator`` reports a job, whatever its deploy mode: the Spark application's id and UI link as
soon as it starts (with progress polling), the History Server link once it has ended, and the result's XComs.

:class:`JobReporter` is made by the operator for each try and handed to its deploy mode
(:mod:`airflow_provider_horovod.operators.modes`), which calls it; it knows nothing of the operator but the values it
was given, and keeps what the "Spark UI" link shows.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from airflow_provider_horovod.clients import SparkRestAccess
from airflow_provider_horovod.hooks.horovod import HorovodHook
from airflow_provider_horovod.links import push_spark_ui_url
from airflow_provider_horovod.operators.common import check_xcom_value, history_app_url, history_server_url
from airflow_provider_horovod.runtime.observability import TIMELINE_FILE_NAME, tensorboard_location
from airflow_provider_horovod.runtime.wire.progress_format import restarts_summary
from airflow_provider_horovod.utils.job_result import JobResult
from airflow_provider_horovod.utils.spark_connection import connection_extras, rest_access
from airflow_provider_horovod.utils.stage_progress import ProgressWatcher
from airflow_provider_horovod.xcom_keys import (
    XCOM_ARTIFACT_DIR,
    XCOM_ARTIFACT_PATHS,
    XCOM_METRICS,
    XCOM_RESTARTS,
    XCOM_SPARK_APP_ID,
    XCOM_SPARK_UI_URL,
    XCOM_TENSORBOARD_DIR,
)


@dataclass(kw_only=True, eq=False)
class JobReporter:
    """
    A try's reporting steps: the application's id and UI link, the History Server link, the result's XComs.

    :param log: the task's logger.
    :param conn_id: the Spark connection (its History Server extra, its REST token), or ``None``.
    :param poll_interval_s: seconds between progress polls of the Spark REST API; ``None``: no polling.
    :param max_return_value_bytes: the largest serialized return value XCom takes, bytes.
    :param publish_link: writes the live Spark UI URL for the "Spark UI" button while the task runs
        (:func:`~airflow_provider_horovod.links.push_spark_ui_url`, which needs the running task's supervisor).
    """

    log: Any
    conn_id: str | None
    poll_interval_s: float | None
    max_return_value_bytes: int
    publish_link: Callable[[Any, str], None] = push_spark_ui_url
    spark_app_id: str | None = field(default=None, init=False)
    """The try's Spark application, once known."""
    spark_ui_url: str | None = field(default=None, init=False)
    """What the "Spark UI" link shows for the try (the live UI, then the History Server)."""
    result: JobResult | None = field(default=None, init=False)
    """The job's result, once :meth:`finish` read it successfully."""
    artifact_dir: str | None = field(default=None, init=False)
    """The job's artifact directory, as :meth:`finish` read it from XCom."""

    def app_started(self, ti: Any, app_id: str, ui_url: str | None) -> ProgressWatcher | None:
        """
        Log and push the application id and UI URL; start progress polling when possible.

        :param ti: the task instance (XCom pushes).
        :param app_id: the Spark application id.
        :param ui_url: its live Spark UI, if it has one.
        :return: the started progress watcher (the caller stops it), or ``None``.
        """
        self.log.info("Spark application %s started%s", app_id, f"; Spark UI: {ui_url}" if ui_url else "")
        ti.xcom_push(key=XCOM_SPARK_APP_ID, value=app_id)
        self.spark_app_id = app_id
        if not ui_url:
            return None
        self.publish_link(ti, ui_url)  # the data XCom, and the link's own key so the button works while it runs
        self.spark_ui_url = ui_url
        if not self.poll_interval_s:
            return None
        return ProgressWatcher(
            ui_url, app_id, self.log.info, poll_interval_s=self.poll_interval_s, access=self._access()
        ).start()

    def _access(self) -> SparkRestAccess | None:
        """The connection's bearer token and CA bundle for the monitoring API (best effort: progress only)."""
        if self.conn_id is None:
            return None
        try:
            return rest_access(HorovodHook.get_connection(self.conn_id), require_token_shape=False)
        except Exception as err:  # noqa: BLE001 - no connection (embedded local master), or a password not a JWS
            self.log.debug("No REST access settings from connection %r: %s", self.conn_id, err)
            return None

    def link_history(self, ti: Any) -> None:
        """
        Once the application has ended: point the "Spark UI" link (XCom ``spark_ui_url``) at the application on
        the Spark History Server, when one is configured (see :func:`history_server_url`); the live UI is gone.

        :param ti: the task instance (XCom push).
        """
        if not self.spark_app_id:
            return
        url = None
        if self.conn_id is not None:
            try:
                url = connection_extras(HorovodHook.get_connection(self.conn_id)).history_server_url
            except Exception:  # noqa: BLE001 - no connection (embedded local master): the config option applies
                url = None
        base = history_server_url(url)
        if not base:
            return
        self.spark_ui_url = history_app_url(base, self.spark_app_id)
        ti.xcom_push(key=XCOM_SPARK_UI_URL, value=self.spark_ui_url)
        self.log.info("The Spark UI link now points at the Spark History Server: %s", self.spark_ui_url)

    def finish(self, ti: Any, result: JobResult) -> Any:
        """
        Push the result's XComs and return rank 0's value after checking XCom can store it.

        :param ti: the task instance (XCom pushes).
        :param result: what the job brought back.
        :raises HorovodResultError: the value cannot go to XCom, or rank 0 refused to send it (above
            ``max_return_value_bytes``; see :func:`check_xcom_value`); ``artifact_paths`` is pushed first.
        """
        import cloudpickle

        ti.xcom_push(key=XCOM_SPARK_APP_ID, value=result.app_id)
        ti.xcom_push(key=XCOM_ARTIFACT_PATHS, value=result.artifact_paths)
        self.log.info("Artifacts pushed to XCom %r: %s", XCOM_ARTIFACT_PATHS, result.artifact_paths)
        if result.metrics:
            ti.xcom_push(key=XCOM_METRICS, value=result.metrics)
            self.log.info("Rank 0's last metrics pushed to XCom %r: %s", XCOM_METRICS, result.metrics)
        if result.restarts:
            ti.xcom_push(key=XCOM_RESTARTS, value=result.restarts)
            self.log.info("The job restarted %s (XCom %r)", restarts_summary(result.restarts), XCOM_RESTARTS)
        # pushed by execute() before submitting (a deferred or reattached try reads it back from XCom)
        artifact_dir = ti.xcom_pull(task_ids=ti.task_id, key=XCOM_ARTIFACT_DIR, map_indexes=ti.map_index)
        self._report_observability(ti, artifact_dir, result.artifact_paths)
        value = None if result.return_value is None else cloudpickle.loads(result.return_value)
        check_xcom_value(value, max_bytes=self.max_return_value_bytes, artifact_paths=result.artifact_paths)
        self.result, self.artifact_dir = result, artifact_dir
        return value

    def _report_observability(self, ti: Any, artifact_dir: str | None, artifact_paths: list[str]) -> None:
        """
        When the job wrote TensorBoard logs, push their directory as XCom ``tensorboard_dir`` and log the command
        that shows them; when it recorded the Horovod Timeline, log where it is and how to open it.

        :param ti: the task instance (XCom push).
        :param artifact_dir: the job's artifact directory.
        :param artifact_paths: the files the job wrote.
        """
        if artifact_dir and (logdir := tensorboard_location(artifact_dir, artifact_paths)):
            ti.xcom_push(key=XCOM_TENSORBOARD_DIR, value=logdir)
            self.log.info("TensorBoard logs (XCom %r): tensorboard --logdir %s", XCOM_TENSORBOARD_DIR, logdir)
        for path in artifact_paths:
            if path.endswith("/" + TIMELINE_FILE_NAME):
                self.log.info("Horovod Timeline: %s (open it in chrome://tracing or https://ui.perfetto.dev)", path)
