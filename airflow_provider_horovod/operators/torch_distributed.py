"""
``TorchDistributedOperator``: run PyTorch ``torch.distributed`` training (DDP, FSDP) as a Spark barrier job from a
DAG, with everything :class:`~airflow_provider_horovod.operators.horovod.HorovodRunnerOperator` does (client,
standalone cluster and Spark Connect deploy modes, deferral, durable reattach, slot waiting, artifact paths and asset
events, progress, the Spark UI link, GPU scheduling): its sibling over
:class:`~airflow_provider_horovod.operators.base.DistributedTrainingOperator` with ``launcher="torch"``, which can
also run an existing torchrun training script unchanged (``script=``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from airflow_provider_horovod.operators.base import DistributedTrainingOperator
from airflow_provider_horovod.runtime.launchers import TORCH, require_launcher
from airflow_provider_horovod.runtime.torch_distributor import script_call

__all__ = ["TorchDistributedOperator", "torch_launcher"]


def torch_launcher(launcher: object) -> str:
    """
    Check the ``launcher`` given to a torch.distributed entry point (it may only repeat ``"torch"``).

    :param launcher: the argument as given.
    :return: ``"torch"``.
    :raises ValueError: not one of the launchers (the message is ``JobSettings``'), or ``"horovod"``.
    """
    return require_launcher(
        launcher,
        TORCH,
        entry_points="TorchDistributedOperator and @task.torch_distributed",
        instead="use HorovodRunnerOperator or @task.horovod for launcher='horovod'",
    )


def script_path(script: object) -> str:
    """
    The absolute path of a training script given as ``script=``.

    :param script: the path (relative paths are made absolute against this process's directory).
    :return: the absolute path.
    :raises ValueError: not a path, or there is no file there (checked when the DAG is parsed; the ranks run the
        script from the same path, so it must be on a shared or installed location).
    """
    if not isinstance(script, str | os.PathLike):
        raise ValueError(f"script must be the path of a Python training script, got {type(script).__name__}")
    path = os.path.abspath(os.fspath(script))
    if not os.path.isfile(path):
        raise ValueError(
            f"script: no training script at {path!r}; give the path of a Python script that exists "
            "where the DAG is parsed and, at the same path, where the ranks run"
        )
    return path


class TorchDistributedOperator(DistributedTrainingOperator):
    """
    Run ``torch.distributed`` training on Spark: one rank per barrier task (``np > 0``) or ``-np`` processes on
    the Spark driver (``np < 0``), each with the torchrun environment (``MASTER_ADDR``, ``MASTER_PORT``,
    ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``GROUP_RANK``/``NODE_RANK``;
    ``CUDA_VISIBLE_DEVICES`` from Spark's GPU scheduling with ``use_gpu=True``).

    The function (or script) calls ``torch.distributed.init_process_group("gloo" | "nccl")`` itself, as under
    ``torchrun`` or PySpark's ``TorchDistributor``. Rank 0's return value becomes the ``return_value`` XCom; the
    files written under :func:`airflow_provider_horovod.runtime.artifact_dir` are pushed as ``artifact_paths``.
    A rank that raises or dies fails the task within seconds naming it (``torch.distributed rank 1 ... failed``),
    with its traceback and last output lines; its peers are stopped.

    .. seealso:: ``docs/torch-distributed.md``

    :param python_callable: the training function, run on every rank with ``op_args``/``op_kwargs``; define its
        imports inside it. Give it or ``script``, not both.
    :param script: the path of a training script written for ``torchrun``, run unchanged on every rank as
        ``torchrun script script_args...`` would (as ``__main__``, ``sys.argv = [script, *script_args]``). It must
        exist where the DAG is parsed and, at the same path, where the ranks run; the task's return value is
        ``None``.
    :param script_args: the script's command-line arguments, turned into strings. (templated)
    :param op_args: positional arguments for ``python_callable``. (templated)
    :param op_kwargs: keyword arguments for ``python_callable``. (templated)
    :param kwargs: every other argument of
        :class:`~airflow_provider_horovod.operators.base.DistributedTrainingOperator` (``np``, ``conn_id``, ``conf``,
        ``deploy_mode``, ``deferrable``, ``use_gpu``, ``start_timeout_s`` (seconds until every rank has started),
        ...) and ``BaseOperator``. ``launcher`` may only be ``"torch"``; ``timeline`` is Horovod's and refused.
    :raises ValueError: an argument is invalid, naming it: both or neither of ``python_callable`` and ``script``,
        a ``script`` that does not exist, ``script_args`` with a function, any ``DistributedTrainingOperator`` argument
        (raised when the DAG is parsed).
    :raises TypeError: ``python_callable`` is not callable.
    """

    template_fields: Sequence[str] = (*DistributedTrainingOperator.template_fields, "script_args")
    ui_color = "#f3d9d2"

    def __init__(
        self,
        *,
        python_callable: Callable[..., Any] | None = None,
        script: str | os.PathLike[str] | None = None,
        script_args: Collection[Any] | None = None,
        op_args: Collection[Any] | None = None,
        op_kwargs: Mapping[str, Any] | None = None,
        launcher: str = TORCH,
        **kwargs: Any,
    ) -> None:
        launcher = torch_launcher(launcher)
        if (python_callable is None) == (script is None):
            raise ValueError(
                "give one of python_callable (a training function) or script (the path of a torchrun "
                f"training script); got {'both' if script is not None else 'neither'}"
            )
        self.script = None if script is None else script_path(script)
        if self.script is None and script_args:
            raise ValueError(
                "script_args are the command-line arguments of script=; pass a function's arguments "
                "in op_args/op_kwargs"
            )
        if self.script is not None and (op_args or op_kwargs):
            raise ValueError("op_args/op_kwargs are python_callable's arguments; give a script's in script_args")
        self.script_args = list(script_args or [])
        if self.script is not None:
            python_callable = script_call(self.script, ())[0]  # run_script, shipped by reference
        assert python_callable is not None  # given, or the script's call
        super().__init__(
            python_callable=python_callable, op_args=op_args, op_kwargs=op_kwargs, launcher=launcher, **kwargs
        )

    def _payload(self) -> tuple[bytes, bytes]:
        """A script's call with its rendered ``script_args``; a function's as the base operator's."""
        if self.script is not None:
            self.python_callable, args = script_call(script_path(self.script), tuple(self.script_args))
            self.op_args, self.op_kwargs = list(args), {}
        return super()._payload()
