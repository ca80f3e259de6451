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
    "Spark UI" button on the task: the live UI of the task's Spark application.

    The operator pushes the URL under :data:`XCOM_SPARK_UI_URL` early in ``execute`` (before waiting), so the
    link works for running and failed tasks too, not only after a successful finish. The driver's UI lives as
    long as the application; afterwards use your Spark history server.
    """

    name = "Spark UI"

    @property
    def xcom_key(self) -> str:
        return XCOM_SPARK_UI_URL

    def get_link(self, operator: BaseOperator, *, ti_key: TaskInstanceKey) -> str:
        """The URL pushed for this try, or ``""`` when the application never started."""
        return XCom.get_value(ti_key=ti_key, key=self.xcom_key) or ""
