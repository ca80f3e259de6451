"""
The job as every rank's launcher sees it: :class:`JobSpec` (plain values, shipped in the task closure) and the
default start timeout.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from airflow_provider_horovod.runtime.settings import (
    DEFAULT_GLOO_TIMEOUT_S,
    DEFAULT_GPU_VISIBILITY,
    DEFAULT_START_TIMEOUT_S,
)
from airflow_provider_horovod.runtime.task.plan import Slot


@dataclass(frozen=True)
class JobSpec:
    """
    Everything a rank's launcher needs; plain values only, because it travels to executors in the task closure.

    :param payload: the payload bytes (see :mod:`~airflow_provider_horovod.runtime.wire.payload`).
    :param np: number of ranks.
    :param artifact_dir: path/URI exported to ranks as ``HOROVOD_AIRFLOW_ARTIFACT_DIR``, or ``None``.
    :param log_address: ``(host, port)`` of the driver's log channel, or ``None`` to keep output on executors.
    :param log_token: the channel's token.
    :param forward_all: forward every rank's output (``driver_log_verbosity="all"``), else rank 0's only.
    :param gloo_timeout_s: ``HOROVOD_GLOO_TIMEOUT_SECONDS`` for every rank.
    :param env: extra environment variables for every rank.
    :param start_timeout_s: seconds a rank may take from process start to a finished ``hvd.init()``
        (loading the function, imports, rendezvous); ``None`` for no limit.
    :param training_timeout_s: seconds a rank may run in all; ``None`` for no limit.
    :param executors_share_driver_stderr: executors run inside the driver process (``local[N]``), so their
        stderr is the driver's: forwarded lines are not echoed there a second time.
    :param use_gpu: give ranks the GPUs Spark scheduled for their tasks; ``False`` hides GPUs from ranks
        (``CUDA_VISIBLE_DEVICES=""``). See :mod:`~airflow_provider_horovod.runtime.task.gpus`.
    :param gpu_visibility: ``"host"`` (device ``hvd.local_rank()`` is the rank's own) or ``"rank"`` (only the
        rank's own GPUs, device 0).
    :param max_return_value_bytes: the largest cloudpickled return value rank 0 sends back, bytes; a larger one is
        replaced by a :class:`~airflow_provider_horovod.runtime.errors.ReturnValueRefused` on rank 0. ``None``: no
        limit.
    :param launcher: ``"horovod"`` or ``"torch"`` (:mod:`~airflow_provider_horovod.runtime.launchers`).
    :param checkpoint_dir: path/URI exported to ranks as ``HOROVOD_AIRFLOW_CHECKPOINT_DIR``, or ``None``.
    :param try_number: the Airflow try, exported to ranks as ``HOROVOD_AIRFLOW_TRY_NUMBER``, or ``None``.
    """

    payload: bytes
    np: int
    artifact_dir: str | None = None
    log_address: tuple[str, int] | None = None
    log_token: str | None = None
    forward_all: bool = False
    gloo_timeout_s: int = DEFAULT_GLOO_TIMEOUT_S
    env: dict[str, str] = field(default_factory=dict)
    executors_share_driver_stderr: bool = False
    start_timeout_s: float | None = DEFAULT_START_TIMEOUT_S
    training_timeout_s: float | None = None
    use_gpu: bool = False
    gpu_visibility: str = DEFAULT_GPU_VISIBILITY
    max_return_value_bytes: int | None = None
    launcher: str = "horovod"
    checkpoint_dir: str | None = None
    try_number: int | None = None

    def forwards(self, slot: Slot) -> bool:
        """
        Whether ``slot``'s output goes to the driver.

        :param slot: the rank's slot.
        """
        return self.forward_all or slot.rank == 0
