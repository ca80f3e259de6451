"""Operator extra links: the Spark UI of the application a task ran."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperatorLink
from airflow.sdk.execution_time.xcom import XCom

from airflow_provider_horovod.xcom_keys import XCOM_MLFLOW_RUN_URL, XCOM_SPARK_UI_URL

if TYPE_CHECKING:
    from airflow.sdk import BaseOperator
    from airflow.sdk.types import TaskInstanceKey


class SparkUILink(BaseOperatorLink):
    """
    "Spark UI" button on the task: the Spark UI of the task's Spark application.

    The operator pushes the URL under :data:`XCOM_SPARK_UI_URL` as soon as the application has started (before
    waiting). The driver's live UI lives as long as the application; once it has ended the link points at the
    application on the Spark History Server when one is configured (the connection's ``history-server-url`` extra or
    ``[horovod] history_server_url``).

    Airflow evaluates the link in the task's process when the try ends or defers and writes the result straight to
    the metadata database under :attr:`xcom_key`, bypassing any custom XCom backend; the UI reads it from there. That
    key is Airflow's default for the class, ``_link_SparkUILink``: never the data key, which goes through the XCom
    backend like every other value the operator pushes (one key written both ways would leave a custom backend's
    reference overwritten by a bare URL). :func:`push_spark_ui_url` writes both keys while the task runs, so the
    button works before the try ends. Runs from before the link had its own key keep working: their DAG version
    names ``spark_ui_url`` as the link's key, where the URL still is.
    """

    name = "Spark UI"

    def get_link(self, operator: BaseOperator, *, ti_key: TaskInstanceKey) -> str:
        """
        The URL for this try, or ``""`` while there is none (not started yet, deferred before it started, or
        the application never started).

        :param operator: the task; a ``HorovodRunnerOperator`` that ran this try knows its URL (no XCom request, so
            no "XCom not found" error in the log while there is none).
        :param ti_key: the task instance; for other operators the URL is the data XCom :data:`XCOM_SPARK_UI_URL`
            (read through the XCom backend), which every version of the operator pushes.
        :return: the URL, or ``""``.
        """
        known = getattr(operator, "spark_ui_url", _UNKNOWN)
        if known is not _UNKNOWN:
            return str(known or "")
        return str(XCom.get_value(ti_key=ti_key, key=XCOM_SPARK_UI_URL) or "")


def push_spark_ui_url(ti: Any, url: str) -> None:
    """
    Publish the task's Spark UI URL while it runs: the data XCom :data:`XCOM_SPARK_UI_URL` through the XCom backend,
    and the "Spark UI" link's own key straight to the metadata database, as Airflow writes links when a try ends (so
    the button works while the job runs, and the end of the try only rewrites the same value).

    :param ti: the running task instance (``context["ti"]``).
    :param url: the application's Spark UI, or its page on the Spark History Server.

    Outside a task that Airflow's supervisor runs (``execute()`` called directly) there is no database to write to:
    the link's key is left to Airflow's own write at the end of the try, as before.
    """
    ti.xcom_push(key=XCOM_SPARK_UI_URL, value=url)
    try:
        XCom._set_xcom_in_db(
            key=SparkUILink().xcom_key,
            value=url,
            dag_id=ti.dag_id,
            task_id=ti.task_id,
            run_id=ti.run_id,
            map_index=ti.map_index,
        )
    except ImportError:  # not in a task the supervisor runs (an operator's execute() called directly): no link yet
        pass


_UNKNOWN = object()


class MlflowRunLink(BaseOperatorLink):
    """
    "MLflow run" button on the task: the page of the try's MLflow run (``mlflow_conn_id``), pushed as XCom
    :data:`XCOM_MLFLOW_RUN_URL` when the run is created; ``""`` without one. Like :class:`SparkUILink`, an operator
    that ran the try answers from what it knows, other instances from the XCom.
    """

    name = "MLflow run"

    def get_link(self, operator: BaseOperator, *, ti_key: TaskInstanceKey) -> str:
        """
        :param operator: the task.
        :param ti_key: the task instance.
        :return: the run's URL, or ``""``.
        """
        known = getattr(operator, "mlflow_run_url", None)
        if known:
            return str(known)
        if getattr(operator, "mlflow_conn_id", None) is None:
            return ""
        return str(XCom.get_value(ti_key=ti_key, key=XCOM_MLFLOW_RUN_URL) or "")
