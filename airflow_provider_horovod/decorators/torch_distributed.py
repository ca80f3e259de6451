"""
``@task.torch_distributed``: the TaskFlow form of
:class:`~airflow_provider_horovod.operators.torch_distributed.TorchDistributedOperator`.

Registered through ``task-decorators`` in ``get_provider_info`` (name ``torch_distributed``), next to
``@task.horovod``; its sibling with ``launcher="torch"``. A DAG file writes::

    from airflow.sdk import task

    @task.torch_distributed(np=2, multiple_outputs=True)
    def train(data_path: str, epochs: int = 10) -> dict:
        import torch.distributed as dist
        dist.init_process_group("gloo")          # MASTER_ADDR, RANK, WORLD_SIZE... are set for it
        ...
        return {"model_path": path, "accuracy": acc} if dist.get_rank() == 0 else None

    metrics = train(prepare())

The decorated function is shipped with cloudpickle to the Spark barrier tasks and run once per rank; the task's
return value is rank 0's. Airflow context values are not passed to it: pass what it needs as arguments.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from airflow.providers.common.compat.sdk import TaskDecorator

from airflow_provider_horovod.decorators.horovod import _DecoratedTraining
from airflow_provider_horovod.operators.base import DistributedTrainingOperator
from airflow_provider_horovod.operators.torch_distributed import TorchDistributedOperator


class _TorchDistributedDecoratedOperator(_DecoratedTraining, TorchDistributedOperator):
    """The operator behind ``@task.torch_distributed``: every ``TorchDistributedOperator`` argument but ``script``,
    the function decorated."""

    custom_operator_name = "@task.torch_distributed"
    template_fields: Sequence[str] = DistributedTrainingOperator.template_fields


def torch_distributed_task(python_callable: Callable[..., Any] | None = None, **kwargs: Any) -> TaskDecorator:
    """
    Wrap a ``torch.distributed`` training function into a task run like
    :class:`~airflow_provider_horovod.operators.torch_distributed.TorchDistributedOperator`.

    :param python_callable: the training function (set by the decorator syntax); it calls
        ``torch.distributed.init_process_group()`` itself.
    :param multiple_outputs: push each key of rank 0's returned dict as its own XCom (as for ``@task``).
    :param kwargs: any ``TorchDistributedOperator`` / ``BaseOperator`` argument but ``script``, ``timeline``: ``np``,
        ``conn_id``, ``conf``, ``deploy_mode``, ``deferrable``, ``use_gpu``, ``outlets``, ``retries``...
    :return: a TaskFlow decorator.
    :raises ValueError: an argument is invalid (when the DAG is parsed), as for the operator.
    """
    return _TorchDistributedDecoratedOperator.decorator(python_callable, **kwargs)
