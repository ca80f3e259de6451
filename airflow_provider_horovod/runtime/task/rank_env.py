"""
The variables a launcher hands its rank process (:func:`worker_environ`): the launcher's (Horovod's Gloo variables
or torchrun's), the devices, the job's, and the protocol's (:mod:`~airflow_provider_horovod.runtime.wire.protocol`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from airflow_provider_horovod.runtime.artifacts import ARTIFACT_DIR_ENV
from airflow_provider_horovod.runtime.checkpoints import CHECKPOINT_DIR_ENV, TRY_NUMBER_ENV
from airflow_provider_horovod.runtime.launchers import Launcher
from airflow_provider_horovod.runtime.wire import protocol
from airflow_provider_horovod.runtime.wire.jobspec import JobSpec


@dataclass(frozen=True)
class RankPipes:
    """
    The rank's ends of the pipes its launcher keeps to it (file descriptors the rank's process inherits).

    :param lifeline: the lifeline pipe's read end (the rank ends when its launcher does).
    :param progress: the milestones pipe's write end.
    :param metrics: the ``report()`` pipe's write end; ``None``: ``report()`` is a no-op.
    :param release: for a rank started ahead of its rendezvous: the release pipe's read end.
    """

    lifeline: int
    progress: int
    metrics: int | None = None
    release: int | None = None


def worker_environ(
    spec: JobSpec,
    *,
    launch_env: Mapping[str, str],
    devices: Mapping[str, str],
    rank_dir: str,
    pipes: RankPipes,
    threads: int | None = None,
) -> dict[str, str]:
    """
    The variables a rank's process gets on top of its launcher's environment
    (:func:`~airflow_provider_horovod.runtime.task.plan.child_environ` applies them). ``spec.env`` overrides the
    devices; the launcher's variables override both. The launcher's defaults (``rank_defaults``, and
    ``cpu_only_env`` without ``use_gpu``) apply only where neither ``spec.env`` nor this process's environment (the
    one the rank inherits) sets them; its framework's error file, where it has one, is in ``rank_dir``.

    :param spec: the job.
    :param launch_env: the rank's launcher variables (:func:`~.plan.gloo_env` or :func:`~.plan.torch_env`).
    :param devices: its device variables (:func:`~.gpus.device_env`).
    :param rank_dir: the rank's own directory: its payload copy, and where rank 0 writes its return value and a
        failing rank its error (the files :mod:`~airflow_provider_horovod.runtime.wire.protocol` names).
    :param pipes: the rank's ends of its pipes.
    :param threads: ``OMP_NUM_THREADS`` for the rank (:func:`omp_threads`), under ``spec.env``; ``None``: none set.
    """
    launcher = spec.launcher
    defaults = dict(launcher.rank_defaults) | ({} if spec.settings.use_gpu else dict(launcher.cpu_only_env))
    extra = {
        **({OMP_THREADS: str(threads)} if threads is not None else {}),
        **{name: value for name, value in defaults.items() if name not in os.environ},
        **devices,
        **spec.env,
        **launch_env,
        protocol.ENV_PAYLOAD: os.path.join(rank_dir, protocol.RANK_PAYLOAD_FILE),
        protocol.ENV_RESULT: os.path.join(rank_dir, protocol.RANK_VALUE_FILE),
        protocol.ENV_ERROR: os.path.join(rank_dir, protocol.RANK_ERROR_FILE),
        protocol.ENV_LIFELINE: str(pipes.lifeline),
        protocol.ENV_PROGRESS: str(pipes.progress),
        protocol.ENV_CHECK_SIZE: str(spec.np),
        protocol.ENV_LAUNCHER: launcher.name,
    }
    framework_error = framework_error_path(launcher, rank_dir)
    if launcher.error_file_variable and framework_error:
        extra[launcher.error_file_variable] = framework_error
    if spec.artifact_dir:
        extra[ARTIFACT_DIR_ENV] = spec.artifact_dir
    if spec.settings.checkpoint_dir:
        extra[CHECKPOINT_DIR_ENV] = spec.settings.checkpoint_dir
    if spec.settings.try_number is not None:
        extra[TRY_NUMBER_ENV] = str(spec.settings.try_number)
    extra[protocol.ENV_MAX_RESULT] = str(spec.settings.max_return_value_bytes)
    extra[protocol.ENV_RESTART_COUNT] = str(spec.restart_count)
    if spec.stoppable:  # the driver may ask the attempt to stop at a checkpoint
        extra[protocol.ENV_STOP_FLAG] = os.path.join(rank_dir, protocol.RANK_STOP_FILE)
    if launcher.restart_variables:
        count, most = launcher.restart_variables
        # torchrun's agent counts the restarts after a failure (a membership change is not one): so do these
        extra[count], extra[most] = str(spec.failures), str(spec.settings.max_restarts)
    if pipes.metrics is not None:
        extra[protocol.ENV_METRICS] = str(pipes.metrics)
    if pipes.release is not None:
        extra[protocol.ENV_RELEASE] = str(pipes.release)
        if not (spec.settings.use_gpu and launcher.imports_devices_late):  # horovod.torch: after CUDA_VISIBLE_DEVICES
            extra[protocol.ENV_PREIMPORT] = ",".join(launcher.preimports(spec.payload))
    return extra


def framework_error_path(launcher: Launcher, rank_dir: str) -> str | None:
    """
    Where the rank's framework writes a failing rank's exception (torchrun's ``TORCHELASTIC_ERROR_FILE``), in the rank's
    own directory; ``None`` for a launcher whose framework writes none.

    :param launcher: the job's launcher.
    :param rank_dir: the rank's own directory.
    """
    if not launcher.error_file_variable:
        return None
    return os.path.join(rank_dir, protocol.RANK_FRAMEWORK_ERROR_FILE)


OMP_THREADS = "OMP_NUM_THREADS"


def omp_threads(spec: JobSpec, inherited: Mapping[str, str]) -> int | None:
    """
    The ``OMP_NUM_THREADS`` of the ``torch.distributed`` ranks started as processes on the driver (``np < 0``):
    torchrun's rule, 1 when more than one process starts and neither ``inherited`` (the driver's environment) nor
    the job's ``env`` sets it; else ``None`` (the rank keeps what it inherits). Horovod ranks: ``None``
    (``horovodrun`` sets nothing).

    Ranks in barrier tasks need nothing from here: Spark's Python worker, whose environment they inherit, already
    has ``OMP_NUM_THREADS=spark.task.cpus`` unless ``spark.executorEnv.OMP_NUM_THREADS`` sets it.

    :param spec: the job.
    :param inherited: the environment the ranks start from.
    """
    if not spec.launcher.sets_omp_threads or OMP_THREADS in spec.env or OMP_THREADS in inherited:
        return None
    return 1 if spec.np > 1 else None
