"""
:class:`TorchDistributor`: a drop-in for PySpark's ``pyspark.ml.torch.distributor.TorchDistributor`` on this
provider's launcher (the ranks started inside the barrier tasks, with the torchrun environment).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from typing import Any

from airflow_provider_horovod.runtime.driver.runner import BarrierRunner
from airflow_provider_horovod.runtime.launchers import TORCH
from airflow_provider_horovod.runtime.rank.script import run_script
from airflow_provider_horovod.runtime.settings import JobSettings

_RUNNER_ARGUMENTS = ("spark", "artifact_dir", "env", "mlflow_run")
"""The keyword arguments that are the runner's, not :class:`JobSettings` fields."""
_SETTING_NAMES = frozenset(f.name for f in dataclasses.fields(JobSettings)) - {"np", "launcher", "use_gpu"}


def validate_num_processes(value: object) -> int:
    """
    Check ``num_processes``.

    :raises ValueError: not an ``int`` above 0 (``bool`` included).
    """
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"num_processes must be a positive int (the number of ranks), got {value!r}")
    return value


def script_call(train_object: str, args: tuple[Any, ...]) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    """
    The call a job made from a training script runs on every rank: :func:`run_script` with the script's absolute
    path and ``args`` as strings (what ``torchrun script.py ARGS`` passes).

    :param train_object: the script's path (relative paths are made absolute against this process's directory).
    :param args: its command-line arguments.
    :raises ValueError: there is no file at ``train_object`` here (checked before anything is submitted; the ranks
        read it from the same path).
    """
    path = os.path.abspath(train_object)
    if not os.path.isfile(path):
        raise ValueError(
            f"train_object: no training script at {path!r}; pass a function, or the path of a Python "
            "script that exists at that path where the ranks run (a shared or installed location)"
        )
    return run_script, (path, [str(a) for a in args])


class TorchDistributor(BarrierRunner):
    """
    Run ``torch.distributed`` training (DDP, FSDP) on a Spark barrier stage: the constructor and :meth:`run` of
    PySpark's ``TorchDistributor``, with this provider's launch (ranks start inside the barrier tasks, about a fifth
    of the time; a failing rank stops the others at once and the error names it, with its traceback and output).

    Each rank gets the torchrun environment (``MASTER_ADDR``, ``MASTER_PORT``, ``RANK``, ``WORLD_SIZE``,
    ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``GROUP_RANK``/``NODE_RANK``; ``CUDA_VISIBLE_DEVICES`` from Spark's GPU
    scheduling) and calls ``torch.distributed.init_process_group("gloo" | "nccl")`` itself; the launcher never
    initializes a process group for it.

    Differences from PySpark's: one rank per barrier task (``spark.task.resource.gpu.amount`` GPUs each, where
    PySpark may start several per task); ``_ssl_conf`` is accepted and ignored (rank 0's store is reached over
    the cluster's network, as PySpark's is).

    :param num_processes: number of ranks (positive int).
    :param local_mode: ``True`` (PySpark's default): the ranks run as processes on the driver; ``False``: one
        Spark barrier task per rank.
    :param use_gpu: give each rank the GPUs Spark scheduled for its task (``local_mode``: the driver's, device
        ``LOCAL_RANK`` each); ``False`` hides GPUs (``CUDA_VISIBLE_DEVICES=""``). PySpark's default ``True``.
    :param _ssl_conf: ignored (PySpark's SSL opt-out).
    :param settings: further keyword arguments of :class:`~airflow_provider_horovod.runtime.driver.runner.HorovodRunner`
        (``spark``, ``artifact_dir``, ``checkpoint_dir``, ``try_number``, ``env``, ``mlflow_run``,
        ``start_timeout_s``, ``training_timeout_s``, ``driver_log_verbosity``, ``gpu_visibility``,
        ``slot_wait_timeout_s``, ``max_return_value_bytes``, ``gloo_timeout_s``, ``max_restarts``, ``restart_on``,
        ``heartbeat_timeout_s``, ``min_np``, ``elastic_wait_s``).
    :raises ValueError: an argument is invalid (before any Spark work), naming it.
    :raises TypeError: an argument that is none of these.
    """

    def __init__(
        self,
        num_processes: int = 1,
        local_mode: bool = True,
        use_gpu: bool = True,
        _ssl_conf: str | None = None,
        **settings: Any,
    ) -> None:
        np = validate_num_processes(num_processes)
        for name in ("np", "launcher", "timeline"):
            if name in settings:
                raise ValueError(
                    f"{name} is not a TorchDistributor argument (num_processes and local_mode set the "
                    "ranks; the launcher is torch.distributed's)"
                )
        self.num_processes = np
        self.local_mode = bool(local_mode)
        self.use_gpu = bool(use_gpu)
        runner_args = {name: settings.pop(name) for name in _RUNNER_ARGUMENTS if name in settings}
        unknown = sorted(set(settings) - _SETTING_NAMES)
        if unknown:
            raise TypeError(f"TorchDistributor() got unexpected keyword arguments {unknown}")
        super().__init__(
            JobSettings(np=-np if self.local_mode else np, use_gpu=self.use_gpu, launcher=TORCH, **settings),
            **runner_args,
        )

    def run(self, train_object: Callable[..., Any] | str, *args: Any, **kwargs: Any) -> Any:
        """
        Run ``train_object`` on every rank.

        :param train_object: a function, called as ``train_object(*args, **kwargs)`` on every rank (it and its
            arguments travel with cloudpickle; imports belong inside it), or the path of a training script, run on
            every rank as ``torchrun train_object *args`` would run it (``kwargs`` must then be empty).
        :return: rank 0's return value; ``None`` for a script.
        :raises ValueError: ``train_object`` is neither callable nor the path of an existing file, or a script was
            given keyword arguments.
        :raises RankFailedError: a rank failed; the message names it, with its traceback and last output lines.
        :raises LaunchError: the stage could not run.
        """
        if isinstance(train_object, str | os.PathLike):
            if kwargs:
                raise ValueError(
                    f"a training script takes command-line arguments only, got keyword arguments {sorted(kwargs)}"
                )
            fn, args = script_call(os.fspath(train_object), args)
        elif callable(train_object):
            fn = train_object
        else:
            raise ValueError(
                f"train_object must be a function or the path of a training script, got {type(train_object).__name__}"
            )
        return self.run_call(fn, args, kwargs)
