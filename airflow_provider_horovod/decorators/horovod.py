"""
``@task.horovod``: the TaskFlow form of :class:`~airflow_provider_horovod.operators.horovod.HorovodRunnerOperator`.

Registered through ``task-decorators`` in ``get_provider_info`` (name ``horovod``), so a DAG file writes::

    from airflow.sdk import task

    @task.horovod(np=2, conn_id="spark_cluster", multiple_outputs=True)
    def train(data_path: str, epochs: int = 10) -> dict:
        import horovod.torch as hvd
        hvd.init()
        ...
        return {"model_path": path, "accuracy": acc} if hvd.rank() == 0 else None

    metrics = train(prepare())            # rank 0's value; XComArgs and .partial().expand() work as for @task

Built on Airflow's own ``DecoratedOperator`` / ``task_decorator_factory`` (imported through the common compat
layer, as the Spark provider's ``@task.pyspark`` does). The decorated function is *not* run in the Airflow task:
like the operator's ``python_callable`` it is shipped with cloudpickle to the Spark barrier tasks and run once per
rank; the task's return value is rank 0's. Airflow context values (``ti``, ``ds``...) are not passed to it: pass
what it needs as arguments (templated values and XComArgs are resolved before it ships).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from airflow.providers.common.compat.sdk import DecoratedOperator, TaskDecorator, task_decorator_factory

from airflow_provider_horovod.operators.horovod import HorovodRunnerOperator


class _DecoratedTraining(DecoratedOperator):
    """
    What TaskFlow adds to a training operator (``@task.horovod``, ``@task.torch_distributed``): the decorated
    function as ``python_callable``, and TaskFlow's output handling (assets in the return value) after a deferral too.
    """

    def __init__(
        self,
        *,
        python_callable: Callable[..., Any],
        op_args: Sequence[Any] | None = None,
        op_kwargs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            kwargs_to_upstream={"python_callable": python_callable, "op_args": op_args, "op_kwargs": op_kwargs},
            python_callable=python_callable,
            op_args=op_args,
            op_kwargs=op_kwargs,
            **kwargs,
        )

    @classmethod
    def decorator(cls, python_callable: Callable[..., Any] | None, **kwargs: Any) -> TaskDecorator:
        """
        The TaskFlow decorator of this operator (Airflow's ``task_decorator_factory``).

        :param python_callable: the training function (set by the decorator syntax).
        :param kwargs: ``multiple_outputs`` and the operator's arguments.
        """
        return task_decorator_factory(python_callable, decorated_operator_class=cls, **kwargs)

    def execute_complete(self, context: Any, event: dict[str, Any]) -> Any:
        """After deferral: as the operator, then TaskFlow's output handling (assets in the return value)."""
        # the training operator this is mixed into has execute_complete (DecoratedOperator has none)
        return self._handle_output(return_value=super().execute_complete(context, event))  # type: ignore[misc]


class _HorovodDecoratedOperator(_DecoratedTraining, HorovodRunnerOperator):
    """The operator behind ``@task.horovod``: every ``HorovodRunnerOperator`` argument, the function decorated."""

    custom_operator_name = "@task.horovod"
    template_fields: Sequence[str] = HorovodRunnerOperator.template_fields


def horovod_task(python_callable: Callable[..., Any] | None = None, **kwargs: Any) -> TaskDecorator:
    """
    Wrap a function into a :class:`~airflow_provider_horovod.operators.horovod.HorovodRunnerOperator` task.

    :param python_callable: the training function (set by the decorator syntax).
    :param multiple_outputs: push each key of rank 0's returned dict as its own XCom (as for ``@task``).
    :param kwargs: any ``HorovodRunnerOperator`` / ``BaseOperator`` argument: ``np``, ``conn_id``, ``conf``,
        ``env_vars``, ``artifact_dir``, ``checkpoint_dir``, ``deploy_mode``, ``deferrable``, ``outlets``, ``retries``...
    :return: a TaskFlow decorator.
    :raises ValueError: an argument is invalid (when the DAG is parsed), as for the operator.
    """
    return _HorovodDecoratedOperator.decorator(python_callable, **kwargs)
