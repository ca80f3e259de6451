"""
HTTP clients for the services the provider talks to while a job runs. They never import Airflow, so triggers,
hooks and the Spark-side runtime can all use them.

* :mod:`~airflow_provider_horovod.clients.spark_rest`: Spark's monitoring API and a standalone master's state
  page and REST submission server (:class:`SparkRestClient`); its asyncio twin, for triggers, in
  :mod:`~airflow_provider_horovod.clients.spark_rest_async` (:class:`AsyncSparkRestClient`).
"""

from __future__ import annotations

from airflow_provider_horovod.clients._spark_rest_base import SparkRestAccess
from airflow_provider_horovod.clients.spark_app_models import (
    ApplicationAttempt,
    ApplicationInfo,
    ExecutorInfo,
    JobInfo,
    StageInfo,
)
from airflow_provider_horovod.clients.spark_master_models import (
    DriverStatus,
    MasterApplication,
    MasterDriver,
    MasterState,
    SubmissionResponse,
    WorkerInfo,
)
from airflow_provider_horovod.clients.spark_rest import SparkRestClient
from airflow_provider_horovod.clients.spark_rest_async import AsyncSparkRestClient
from airflow_provider_horovod.clients.spark_rest_calls import RetryPolicy
from airflow_provider_horovod.clients.spark_rest_errors import (
    SparkRestAuthError,
    SparkRestError,
    SparkRestPayloadError,
    SparkRestTLSError,
    SparkRestUnavailableError,
    SparkSubmissionError,
)

__all__ = [
    "ApplicationAttempt",
    "ApplicationInfo",
    "AsyncSparkRestClient",
    "DriverStatus",
    "ExecutorInfo",
    "JobInfo",
    "MasterApplication",
    "MasterDriver",
    "MasterState",
    "RetryPolicy",
    "SparkRestAccess",
    "SparkRestAuthError",
    "SparkRestClient",
    "SparkRestError",
    "SparkRestPayloadError",
    "SparkRestTLSError",
    "SparkRestUnavailableError",
    "SparkSubmissionError",
    "StageInfo",
    "SubmissionResponse",
    "WorkerInfo",
]
