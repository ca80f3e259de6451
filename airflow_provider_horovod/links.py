"""Operator extra links: the Spark UI of the application a task ran."""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow.sdk import BaseOperatorLink
from airflow.sdk.execution_time.xcom import XCom

if TYPE_CHECKING:
    from airflow.models.taskinstancekey import TaskInstanceKey
    from airflow.sdk import BaseOperator

XCOM_SPARK_UI_URL = "spark_ui_url"
"""XCom key of the Spark UI URL; the operator pushes it as soon as the driver reports it."""


class SparkUILink(BaseOperatorLink):
    """
    "Spark UI" button on the task: the Spark UI of the task's Spark application.

    The operator pushes the URL under :data:`XCOM_SPARK_UI_URL` as soon as the application has started (before
    waiting), so the link works for running and failed tasks too. The driver's live UI lives as long as the
    application; once it has ended the link points at the application on the Spark History Server when one is
    configured (the connection's ``history-server-url`` extra or ``[horovod] history_server_url``).

    Airflow evaluates the link in the task's process when the try ends or defers, and stores the result under
    :attr:`xcom_key`; it is read from the operator instance that ran (no XCom request, so no "XCom not found"
    error in the log when the application never started or has not started yet).
    """

    name = "Spark UI"

    @property
    def xcom_key(self) -> str:
        return XCOM_SPARK_UI_URL

    def get_link(self, operator: BaseOperator, *, ti_key: TaskInstanceKey) -> str:
        """
        The URL for this try, or ``""`` while there is none (not started yet, deferred before it started, or
        the application never started).

        :param operator: the task; a ``HorovodRunnerOperator`` that ran this try knows its URL.
        :param ti_key: the task instance; other operators' URLs are read from its XCom.
        """
        known = getattr(operator, "spark_ui_url", _UNKNOWN)
        if known is not _UNKNOWN:
            return known or ""
        return XCom.get_value(ti_key=ti_key, key=self.xcom_key) or ""


_UNKNOWN = object()
