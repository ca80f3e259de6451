"""
What each launcher does inside a rank's own process, before the training function runs (the rank side of
:mod:`airflow_provider_horovod.runtime.task.backends`): which variable holds the rank, and when the worker wraps the
call that joins the rank to the others (:mod:`~airflow_provider_horovod.runtime.rank.guards`). The worker resolves one
:class:`RankBackend` from ``HOROVOD_AIRFLOW_LAUNCHER`` (:func:`rank_backend_for`) and calls it.
"""

from __future__ import annotations

from airflow_provider_horovod.runtime.launchers import HOROVOD, TORCH, Launcher, get_launcher
from airflow_provider_horovod.runtime.observability import start_timeline
from airflow_provider_horovod.runtime.rank.guards import Progress, guard_init, guard_process_group_init


class RankBackend:
    """
    One launcher's behaviour in a rank's process. Subclasses: :class:`HorovodRankBackend`,
    :class:`TorchRankBackend`.

    :param launcher: the launcher's description.
    :param rank_variable: the environment variable holding this process's rank (as its own launcher sets it).
    """

    def __init__(self, launcher: Launcher, rank_variable: str) -> None:
        self.launcher = launcher
        self.rank_variable = rank_variable

    def on_start(self, rank: int, expected_size: int | None, progress: Progress) -> None:
        """
        At the worker's start, before any import of the function's framework and before a rank started ahead of
        its rendezvous is released.

        :param rank: this process's rank.
        :param expected_size: the job's ``np`` for the world-size check; ``None`` skips it.
        :param progress: where the join's milestones go.
        """

    def preload(self) -> None:
        """
        In a fork server (:mod:`~airflow_provider_horovod.runtime.rank.fork_server`), before it imports the ranks'
        framework: what must be in place before an import binds it. A forked rank's :meth:`on_start` and
        :meth:`on_released` then point it at that rank.
        """

    def on_released(self, expected_size: int | None, progress: Progress) -> None:
        """
        Once the rank has its whole environment (its devices included), before the payload is loaded.

        :param expected_size: the job's ``np`` for the world-size check; ``None`` skips it.
        :param progress: where the join's milestones go.
        :raises ImportError: the launcher's framework is not importable by this Python (the worker reports it as a
            load error naming :attr:`Launcher.label`).
        """


class HorovodRankBackend(RankBackend):
    """Horovod: ``hvd.init()`` is wrapped before anything can bind it, and the Timeline set up before it runs."""

    def preload(self) -> None:
        guard_init(None, Progress())  # before the server's import of horovod.torch binds hvd.init

    def on_start(self, rank: int, expected_size: int | None, progress: Progress) -> None:
        guard_init(expected_size, progress)  # before any import binds hvd.init
        start_timeline(rank)  # before the function's hvd.init(): its atexit handler must run after Horovod's


class TorchRankBackend(RankBackend):
    """``torch.distributed``: ``init_process_group()`` is wrapped once the devices are set (it imports torch)."""

    def on_released(self, expected_size: int | None, progress: Progress) -> None:
        guard_process_group_init(expected_size, progress)  # CUDA_VISIBLE_DEVICES is set before torch looks


RANK_BACKENDS: dict[str, RankBackend] = {
    HOROVOD: HorovodRankBackend(get_launcher(HOROVOD), "HOROVOD_RANK"),
    TORCH: TorchRankBackend(get_launcher(TORCH), "RANK"),
}
"""Each launcher's :class:`RankBackend`, by the ``launcher`` setting's value."""


def rank_backend_for(launcher_name: str) -> RankBackend:
    """
    The rank-side behaviour of the launcher named ``launcher_name``.

    :raises ValueError: not one of the launchers (the message lists them).
    """
    get_launcher(launcher_name)  # the error naming the allowed values
    return RANK_BACKENDS[launcher_name]
