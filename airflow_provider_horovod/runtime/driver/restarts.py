"""
In-job restarts (``max_restarts``, ``restart_on``): which failures of an attempt start the barrier job again on the
same Spark application, the back-off before each, and the account a restart gives.

Restartable by default are the failures that are nobody's bug and would not repeat: a lost executor or host
(:class:`~airflow_provider_horovod.runtime.errors.ExecutorLostError`), a rank ended by a signal
(:class:`~airflow_provider_horovod.runtime.rank_errors.RankKilledError`: ``kill -9``, the OOM killer, a preempted
node's processes) and a rendezvous that never completed
(:class:`~airflow_provider_horovod.runtime.rank_errors.RendezvousError`). An exception raised by the training code
fails at once, as it would fail again, unless its type is in ``restart_on``. Spark never re-attempts a barrier
ResultStage; the driver submits the job again (torchrun's agent restarts its workers the same way, Ray Train its
worker group), and the ranks resume through :func:`~airflow_provider_horovod.runtime.load_checkpoint`.

Some restarts are not failures: an attempt whose rank 0 stopped after a checkpoint because the driver asked
(:data:`~airflow_provider_horovod.runtime.rank_errors.STOPPED_AT_CHECKPOINT`: all ``np`` slots free again for an
attempt with fewer ranks, elastic ``min_np``; an executor of the attempt being decommissioned) starts again from that
checkpoint, without a back-off and without using up ``max_restarts`` (as torchrun's agent restarts its workers for a
new node, and Ray Train resizes, without counting a failure). These are *planned* restarts.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from typing import Any

from airflow_provider_horovod.runtime.errors import ExecutorLostError
from airflow_provider_horovod.runtime.rank_errors import (
    STOPPED_AT_CHECKPOINT,
    RankFailedError,
    RankKilledError,
    RendezvousError,
)
from airflow_provider_horovod.runtime.wire.progress_format import restart_line

ANY_EXCEPTION = "*"
"""``restart_on`` entry that makes every exception of the training code restartable."""
MAX_BACKOFF_S = 30.0
"""The longest pause before a restart, seconds (the pauses double from 1 s)."""


def backoff_s(restart: int) -> float:
    """
    The pause before restart number ``restart`` (1 for the first), seconds: none before the first (torchrun's agent
    and Ray Train restart at once; the wait for slots and the ranks' start are pause enough for a single fault), then
    1, 2, 4, ... up to :data:`MAX_BACKOFF_S`, so a fault that repeats at once (a node going down for good) does not
    spin.

    :param restart: the restart's number, from 1.
    """
    return 0.0 if restart <= 1 else min(MAX_BACKOFF_S, 2.0 ** (restart - 2))


def _matches(exc_type: str, names: Sequence[str]) -> bool:
    bare = exc_type.rsplit(".", 1)[-1]
    return any(name in (ANY_EXCEPTION, exc_type, bare) for name in names)


def restart_cause(err: BaseException, restart_on: Sequence[str] = ()) -> str | None:
    """
    Why ``err`` may restart the attempt, in a few words for the log (``executor 1 on 127.0.0.1 lost (exit code
    137)``), or ``None`` when it must fail the job (the training code's own exception not in ``restart_on``, bad
    input, a cancelled job, a return value too large).

    :param err: what the attempt raised.
    :param restart_on: exception type names of the training code that restart too (``ValueError``,
        ``torch.OutOfMemoryError``; a bare name matches any module's), or ``"*"`` for every one.
    """
    if stopped_at_checkpoint(err):
        return f"rank 0 {err.exc_message}"  # type: ignore[attr-defined]  # "stopped after saving checkpoint step N: why"
    if isinstance(err, ExecutorLostError):
        where = f" on {err.host}" if err.host else ""
        why = f" ({err.reason})" if err.reason else ""
        held = f", holding rank {err.rank}" if err.rank is not None else ""
        return f"executor {err.executor}{where} lost{why}{held}"
    if isinstance(err, RankKilledError):
        return f"rank {err.rank} killed by {getattr(err.signal, 'name', err.signal)}"
    if isinstance(err, RendezvousError):
        return f"rank {err.rank} never joined ({err.exc_type})"
    if isinstance(err, RankFailedError) and err.exc_type and _matches(err.exc_type, restart_on):
        return f"rank {err.rank} raised {err.exc_type}: {err.exc_message}"
    return None


def stopped_at_checkpoint(err: BaseException) -> bool:
    """
    Whether ``err`` is an attempt's planned stop at a checkpoint that the driver asked for (rank 0's
    :data:`~airflow_provider_horovod.runtime.rank_errors.STOPPED_AT_CHECKPOINT`), not a failure.

    :param err: what the attempt raised.
    """
    return isinstance(err, RankFailedError) and err.exc_type == STOPPED_AT_CHECKPOINT


@dataclasses.dataclass(frozen=True)
class Restart:
    """
    One restart of the job: which, why, when, and how long it paused.

    :param number: from 1.
    :param of: the job's ``max_restarts``.
    :param cause: :func:`restart_cause`'s words.
    :param error: the failed attempt's error, ``Type: first line``.
    :param at: when the attempt failed, seconds since the epoch.
    :param backoff_s: the pause before the next attempt, seconds.
    :param step: the last step rank 0 reported before the failure (``report()``, a library's trainer), if any: the
        failed attempt trained up to it.
    :param planned: a restart the driver asked for at a checkpoint (:func:`stopped_at_checkpoint`): not a failure, not
        counted in ``of``.
    :param failure: which restart after a failure this is, from 1 (what ``of`` bounds; differs from ``number`` after a
        planned restart); ``None`` for a planned one.
    :param ranks: how many ranks the attempt that ended ran (fewer than ``np`` in a shrunk elastic attempt), if known.
    """

    number: int
    of: int
    cause: str
    error: str
    at: float
    backoff_s: float
    step: int | None = None
    planned: bool = False
    failure: int | None = None
    ranks: int | None = None

    def line(self) -> str:
        """The task log's line for it: ``restart 1/3: rank 1 killed by SIGKILL at step 12; starting again in 1 s``."""
        return restart_line(self.to_dict())

    def to_dict(self) -> dict[str, Any]:
        """JSON-able, for ``progress.json`` and the Airflow side."""
        return dataclasses.asdict(self)


def restarted(err: BaseException, restarts: Sequence[Restart], max_restarts: int) -> BaseException:
    """
    ``err`` with the attempts before it told: a note (``add_note``) listing every restart and its cause, so the
    task's error says what was tried; the restarts are also its ``restarts`` attribute.

    :param err: the last attempt's error (raised as it is).
    :param restarts: the restarts that came before it.
    :param max_restarts: the budget, for the note.
    """
    if restarts:
        planned = sum(r.planned for r in restarts)
        counted = f"{len(restarts) - planned} time(s) of max_restarts={max_restarts}" + (
            f" and {planned} time(s) at a checkpoint the driver asked for" if planned else ""
        )
        lines = [f"the job was restarted {counted} before this failure:"]
        lines += [f"  restart {r.number}: {r.cause}" for r in restarts]
        err.add_note("\n".join(lines))
    err.restarts = [r.to_dict() for r in restarts]  # type: ignore[attr-defined]
    return err


def told(err: BaseException) -> str:
    """
    ``err``'s message with its notes (:func:`restarted`'s account of the restarts before it): the message a side that
    re-raises it as another type (the Airflow side's ``HorovodJobError``) keeps.

    :param err: the error.
    """
    return "\n".join([str(err), *getattr(err, "__notes__", ())])


class RestartBudget:
    """
    The restarts one job may make (``max_restarts``) and those it made.

    :param max_restarts: how many times a failed attempt may be started again (0: never).
    :param restart_on: see :func:`restart_cause`.
    :param clock: the wall clock (tests).
    """

    def __init__(self, max_restarts: int, restart_on: Sequence[str] = (), clock: Any = time.time) -> None:
        self.max_restarts = max_restarts
        self.restart_on = tuple(restart_on)
        self.restarts: list[Restart] = []
        self._clock = clock

    @property
    def count(self) -> int:
        """Restarts made so far: the restart count of the attempt about to run (0 for the first)."""
        return len(self.restarts)

    @property
    def failures(self) -> int:
        """Restarts made so far after a failure: what ``max_restarts`` bounds (a planned restart is not one)."""
        return sum(not r.planned for r in self.restarts)

    def next_restart(self, err: BaseException, step: int | None = None, ranks: int | None = None) -> Restart | None:
        """
        The restart ``err`` earns, recorded, or ``None`` when it fails the job (not restartable, or the budget is
        spent).

        :param err: what the attempt raised.
        :param step: the last step rank 0 reported in the failed attempt, if any.
        :param ranks: how many ranks the failed attempt ran, if known.
        """
        planned = stopped_at_checkpoint(err)
        cause = restart_cause(err, self.restart_on)
        if cause is None or (not planned and self.failures >= self.max_restarts):
            return None
        number = self.count + 1
        error = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
        restart = Restart(
            number=number,
            of=self.max_restarts,
            cause=cause,
            error=error,
            at=self._clock(),
            backoff_s=0.0 if planned else backoff_s(self.failures + 1),
            step=step,
            planned=planned,
            failure=None if planned else self.failures + 1,
            ranks=ranks,
        )
        self.restarts.append(restart)
        return restart
