"""
What each launcher does in the process that starts its ranks (a barrier task, or the Spark driver for ``np < 0``),
after Ray Train's ``Backend`` (``on_start``, ``on_training_start``, ``on_shutdown``): the task's own checks, the
job's rendezvous (Horovod's HTTP store, or the port rank 0's ``torch.distributed`` store will listen on), each rank's
launch environment, and what a task reports once its rank has exited. The launch code resolves one
:class:`LaunchBackend` per job (:func:`backend_for`) and calls it; it never compares launcher names.
"""

from __future__ import annotations

import socket
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from airflow_provider_horovod.runtime.launchers import HOROVOD, TORCH, Launcher, get_launcher
from airflow_provider_horovod.runtime.task.checks import _check_host_name
from airflow_provider_horovod.runtime.task.plan import Slot, gloo_env, torch_env
from airflow_provider_horovod.runtime.task.rendezvous import (
    _report_done,
    _start_rendezvous,
    _stop_rendezvous,
    _stop_rendezvous_soon,
    reserve_port,
)


@dataclass
class Rendezvous:
    """
    The job's rendezvous as the process that opened it holds it (task 0, or the driver).

    :param port: the port every rank is given (Horovod's store, or ``MASTER_PORT``).
    :param run_id: the job's id for the ranks (``TORCHELASTIC_RUN_ID``), ``None`` where the launcher has none.
    :param server: Horovod's ``RendezvousServer``, where this process serves the store.
    :param reserved: the socket holding ``port`` for rank 0's ``torch.distributed`` store.
    """

    port: int
    run_id: str | None = None
    server: Any = None
    reserved: socket.socket | None = None

    def on_uninitialized(self, watcher: Callable[[int], None]) -> None:
        """
        Call ``watcher(rank)`` when a rank reports an exit without ever joining (Horovod's store hears of it; a
        ``torch.distributed`` store lives in rank 0's own process and tells nothing).

        :param watcher: called with the rank, from the store's thread.
        """
        if self.server is not None:
            self.server.ranks_done.on_uninitialized(lambda rank: watcher(int(rank)))

    def wait_for_ranks(self, ranks: Iterable[int]) -> None:
        """
        Block until every rank of ``ranks`` has reported its exit, so that a store served here outlives them all.

        :param ranks: the other ranks of the job.
        """
        if self.server is not None:
            self.server.ranks_done.wait_for(ranks)

    def release_port(self) -> None:
        """Stop holding the port reserved for rank 0's store (its ranks have ended)."""
        if self.reserved is not None:
            self.reserved.close()
            self.reserved = None

    def close(self, *, soon: bool = False) -> None:
        """
        Release everything: the reserved port, and the store served here.

        :param soon: stop the store in a background thread (Horovod's ``stop()`` waits for its serving loop's next
            poll, which a task that has finished need not wait for).
        """
        self.release_port()
        if self.server is not None:
            server, self.server = self.server, None
            if soon:
                _stop_rendezvous_soon(server)
            else:
                _stop_rendezvous(server)


@dataclass(frozen=True)
class RendezvousPoint:
    """
    Where and how a rank reaches the job's rendezvous, as its launch environment tells it
    (:meth:`LaunchBackend.rank_env`).

    :param addr: the rendezvous's host address.
    :param iface: the network interface the rank reaches ``addr`` through.
    :param gloo_timeout_s: Gloo's timeout for the job's collectives, in seconds.
    :param port: the rendezvous's port; ``None`` while it is not known yet (a rank started ahead of the rendezvous
        gets the environment again with its release).
    :param run_id: :attr:`Rendezvous.run_id`.
    """

    addr: str
    iface: str
    gloo_timeout_s: int
    port: int | None = None
    run_id: str | None = None


class LaunchBackend:
    """
    One launcher's behaviour where its ranks are started. Subclasses: :class:`HorovodBackend`,
    :class:`TorchBackend`.

    :param launcher: the launcher's description (:data:`~airflow_provider_horovod.runtime.launchers.LAUNCHERS`).
    """

    def __init__(self, launcher: Launcher) -> None:
        self.launcher = launcher

    def check_task(self, plan: list[Slot], host: str) -> None:
        """
        The launcher's own checks of this task before its rank starts.

        :param plan: the job's plan.
        :param host: this task's host address.
        :raises LaunchError: the task cannot run a rank of this launcher.
        """

    def open_rendezvous(self, plan: list[Slot], *, bind: str, peers: Iterable[str] = ()) -> Rendezvous:
        """
        Open the job's rendezvous, in the process that starts rank 0 (task 0, or the driver).

        :param plan: the job's plan.
        :param bind: the address the ranks reach it on (``127.0.0.1`` on the driver, task 0's host address).
        :param peers: the other hosts of the job (the only ones, besides loopback, a store served here answers).
        """
        raise NotImplementedError

    def rank_env(self, slot: Slot, plan: Sequence[Slot], point: RendezvousPoint) -> dict[str, str]:
        """
        The launcher's environment of one rank, all strings.

        :param slot: the rank's place in the plan.
        :param plan: the whole plan.
        :param point: where and how the rank reaches the job's rendezvous.
        """
        raise NotImplementedError

    def rank_done(self, addr: str, port: int, rank: int, *, initialized: bool) -> None:
        """
        Tell the rendezvous that this task's rank (not rank 0's task) exited successfully.

        :param addr: the rendezvous's host address.
        :param port: its port.
        :param rank: this task's rank.
        :param initialized: whether the rank ever joined the others.
        """


class HorovodBackend(LaunchBackend):
    """Horovod with Gloo, as ``horovodrun --gloo`` starts it: an HTTP rendezvous store the launcher serves."""

    def check_task(self, plan: list[Slot], host: str) -> None:
        _check_host_name(plan, host)  # Horovod's ranks find their peers by host name

    def open_rendezvous(self, plan: list[Slot], *, bind: str, peers: Iterable[str] = ()) -> Rendezvous:
        server, port = _start_rendezvous(plan, peers=peers, bind=bind)
        return Rendezvous(port=port, server=server)

    def rank_env(self, slot: Slot, plan: Sequence[Slot], point: RendezvousPoint) -> dict[str, str]:
        return gloo_env(
            slot,
            rendezvous_addr=point.addr,
            rendezvous_port=point.port or 0,
            iface=point.iface,
            gloo_timeout_s=point.gloo_timeout_s,
        )

    def rank_done(self, addr: str, port: int, rank: int, *, initialized: bool) -> None:
        _report_done(addr, port, rank, initialized=initialized)


class TorchBackend(LaunchBackend):
    """
    ``torch.distributed`` as ``torchrun`` starts it: rank 0's ``init_process_group()`` starts the ``TCPStore`` on a
    port the launcher holds for it (:func:`~airflow_provider_horovod.runtime.task.rendezvous.reserve_port`).
    """

    def open_rendezvous(self, plan: list[Slot], *, bind: str, peers: Iterable[str] = ()) -> Rendezvous:
        reserved = reserve_port(bind)
        return Rendezvous(port=reserved.getsockname()[1], run_id=uuid.uuid4().hex, reserved=reserved)

    def rank_env(self, slot: Slot, plan: Sequence[Slot], point: RendezvousPoint) -> dict[str, str]:
        return torch_env(
            slot, plan, master_addr=point.addr, master_port=point.port, iface=point.iface, run_id=point.run_id
        )

    # rank_done: the store lives in rank 0's process, which ends with the job: nothing to report to


BACKENDS: dict[str, LaunchBackend] = {
    HOROVOD: HorovodBackend(get_launcher(HOROVOD)),
    TORCH: TorchBackend(get_launcher(TORCH)),
}
"""Each launcher's :class:`LaunchBackend`, by the ``launcher`` setting's value."""


def backend_for(launcher_name: str) -> LaunchBackend:
    """
    The launch behaviour of the launcher named ``launcher_name``.

    :raises ValueError: not one of the launchers (the message lists them).
    """
    get_launcher(launcher_name)  # the error naming the allowed values
    return BACKENDS[launcher_name]
