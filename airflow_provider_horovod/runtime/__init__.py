"""
The Spark-side runtime: what runs on the Spark driver and executors.

This subpackage never imports Airflow (clusters do not have it installed); a test checks that. Its public
names are loaded lazily, so an executor importing :mod:`airflow_provider_horovod.runtime.task.launch` loads only
what a rank's launcher needs.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow_provider_horovod.runtime.artifacts import artifact_dir
    from airflow_provider_horovod.runtime.checkpoints import (
        checkpoint_dir,
        load_checkpoint,
        restart_count,
        save_checkpoint,
        try_number,
    )
    from airflow_provider_horovod.runtime.data import rank_shard
    from airflow_provider_horovod.runtime.deepspeed_distributor import DeepspeedTorchDistributor
    from airflow_provider_horovod.runtime.driver.runner import HorovodRunner
    from airflow_provider_horovod.runtime.errors import (
        ExecutorLostError,
        HorovodRuntimeError,
        JobCancelledError,
        LaunchError,
        PayloadError,
        ReturnValueTooLargeError,
    )
    from airflow_provider_horovod.runtime.observability import tensorboard_dir
    from airflow_provider_horovod.runtime.rank_errors import RankFailedError, RankKilledError, RendezvousError
    from airflow_provider_horovod.runtime.reports import report
    from airflow_provider_horovod.runtime.torch_distributor import TorchDistributor

_EXPORTS = {
    "ExecutorLostError": "airflow_provider_horovod.runtime.errors",
    "HorovodRunner": "airflow_provider_horovod.runtime.driver.runner",
    "HorovodRuntimeError": "airflow_provider_horovod.runtime.errors",
    "JobCancelledError": "airflow_provider_horovod.runtime.errors",
    "LaunchError": "airflow_provider_horovod.runtime.errors",
    "PayloadError": "airflow_provider_horovod.runtime.errors",
    "RankFailedError": "airflow_provider_horovod.runtime.rank_errors",
    "RankKilledError": "airflow_provider_horovod.runtime.rank_errors",
    "RendezvousError": "airflow_provider_horovod.runtime.rank_errors",
    "ReturnValueTooLargeError": "airflow_provider_horovod.runtime.errors",
    "artifact_dir": "airflow_provider_horovod.runtime.artifacts",
    "checkpoint_dir": "airflow_provider_horovod.runtime.checkpoints",
    "load_checkpoint": "airflow_provider_horovod.runtime.checkpoints",
    "save_checkpoint": "airflow_provider_horovod.runtime.checkpoints",
    "try_number": "airflow_provider_horovod.runtime.checkpoints",
    "restart_count": "airflow_provider_horovod.runtime.checkpoints",
    "rank_shard": "airflow_provider_horovod.runtime.data",
    "tensorboard_dir": "airflow_provider_horovod.runtime.observability",
    "report": "airflow_provider_horovod.runtime.reports",
    "TorchDistributor": "airflow_provider_horovod.runtime.torch_distributor",
    "DeepspeedTorchDistributor": "airflow_provider_horovod.runtime.deepspeed_distributor",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
