"""
The job as every rank's launcher sees it: :class:`JobSpec` (plain values, shipped in the task closure).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from airflow_provider_horovod.runtime.launchers import Launcher, get_launcher
from airflow_provider_horovod.runtime.settings import JobSettings
from airflow_provider_horovod.runtime.task.plan import Slot


@dataclass(frozen=True)
class JobSpec:
    """
    Everything a rank's launcher needs: the job's settings as they are (not copied), and what the driver adds.
    Plain values only, because it travels to executors in the task closure.

    :param payload: the payload bytes (see :mod:`~airflow_provider_horovod.runtime.wire.payload`).
    :param settings: the job's knobs (:class:`~airflow_provider_horovod.runtime.settings.JobSettings`): timeouts,
        GPUs, the launcher, the return-value limit, the checkpoint directory and the try.
    :param artifact_dir: path/URI exported to ranks as ``HOROVOD_AIRFLOW_ARTIFACT_DIR``, or ``None``.
    :param env: extra environment variables for every rank.
    :param log_address: ``(host, port)`` of the driver's log channel, or ``None`` to keep output on executors.
    :param log_token: the channel's token.
    :param executors_share_driver_stderr: executors run inside the driver process (``local[N]``), so their
        stderr is the driver's: forwarded lines are not echoed there a second time.
    :param restart_count: how many times the driver restarted the job before this attempt (0 on the first;
        ``max_restarts``).
    :param failures: how many of those restarts followed a failure (what ``max_restarts`` bounds; a restart the
        driver asked for at a checkpoint is not one): torchrun's ``TORCHELASTIC_RESTART_COUNT``.
    :param stoppable: the driver may ask this attempt to stop at its next checkpoint (growing back, a decommissioning
        executor): rank 0's task listens for it, and the ranks get ``HOROVOD_AIRFLOW_STOP_FLAG``.
    :param grows_to: in an attempt with fewer ranks than the job's ``np`` (elastic ``min_np``), that ``np``: the
        driver asks the attempt to stop at its next checkpoint once all ``np`` slots are free again, so that the job
        starts again with ``np`` ranks. ``None``: the attempt runs all ``np``.
    :param fork_key: a secret of the job (all its attempts), for a job that may restart: its tasks start a fork server
        per host that a restarted attempt's ranks are forked from, their framework imported already
        (:mod:`~airflow_provider_horovod.runtime.rank.fork_server`). ``None``: every rank starts as a new process.
    """

    payload: bytes
    settings: JobSettings
    artifact_dir: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    log_address: tuple[str, int] | None = None
    log_token: str | None = None
    executors_share_driver_stderr: bool = False
    restart_count: int = 0
    failures: int = 0
    stoppable: bool = False
    grows_to: int | None = None
    fork_key: str | None = None

    @property
    def np(self) -> int:
        """The number of ranks (``abs(settings.np)``: ``np < 0`` runs them on the driver)."""
        return abs(self.settings.np)

    @property
    def launcher(self) -> Launcher:
        """The job's launcher (:data:`~airflow_provider_horovod.runtime.launchers.LAUNCHERS`)."""
        return get_launcher(self.settings.launcher)

    def forwards(self, slot: Slot) -> bool:
        """
        Whether ``slot``'s output goes to the driver (``driver_log_verbosity="all"``: every rank's; else rank 0's).

        :param slot: the rank's slot.
        """
        return self.settings.driver_log_verbosity == "all" or slot.rank == 0
