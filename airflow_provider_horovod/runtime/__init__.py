"""
The Spark-side runtime: what runs on the Spark driver and executors.

This subpackage never imports Airflow (clusters do not have it installed); a test checks that.
"""

from __future__ import annotations

from airflow_provider_horovod.runtime.artifacts import artifact_dir
from airflow_provider_horovod.runtime.errors import HorovodRuntimeError, LaunchError, PayloadError, RankFailedError
from airflow_provider_horovod.runtime.runner import HorovodRunner

__all__ = [
    "HorovodRunner",
    "HorovodRuntimeError",
    "LaunchError",
    "PayloadError",
    "RankFailedError",
    "artifact_dir",
]
