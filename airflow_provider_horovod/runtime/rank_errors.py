"""
A rank's failure, of its kind: :class:`RankFailedError` (a rank exited non-zero: its rank, exit status, exception,
traceback and output tail), :class:`RankKilledError` (a signal ended it), :class:`RendezvousError` (the ranks never
all joined); the ``exc_type`` values of the stops the launcher itself makes; the marker that carries a failure
through Spark's exception text; and :func:`root_cause`, which picks the failure to report among several ranks'.
Part of the hierarchy in :mod:`airflow_provider_horovod.runtime.errors`.
"""

from __future__ import annotations

import base64
import json
import re
import signal
from typing import Any

from airflow_provider_horovod.runtime.bounds import (
    MAX_EXC_MESSAGE_CHARS,
    MAX_LINE_CHARS,
    MAX_MESSAGE_CHARS,
    MAX_TRACEBACK_CHARS,
    cut,
    keep_end,
)
from airflow_provider_horovod.runtime.errors import HorovodRuntimeError
from airflow_provider_horovod.runtime.launchers import HOROVOD, get_launcher

START_TIMEOUT = "airflow_provider_horovod.StartTimeout"
"""``exc_type`` of a rank stopped because it was still loading the function when ``start_timeout_s`` ran out."""
WAITING_FOR_PEERS = "airflow_provider_horovod.WaitingForPeers"
"""``exc_type`` of a rank stopped while waiting in ``hvd.init()`` for the others when ``start_timeout_s`` ran out."""
TRAINING_TIMEOUT = "airflow_provider_horovod.TrainingTimeout"
"""``exc_type`` of a rank stopped because it was still running when ``training_timeout_s`` ran out."""
LOAD_ERROR = "airflow_provider_horovod.LoadError"
"""``exc_type`` of a rank that could not load (unpickle) the training function; the message is the cause."""
PEER_LEFT = "airflow_provider_horovod.PeerLeft"
"""``exc_type`` of a rank stopped inside ``hvd.init()`` because another rank ended without ever calling it."""
STOPPED_AT_CHECKPOINT = "airflow_provider_horovod.StoppedAtCheckpoint"
"""``exc_type`` of rank 0 when its ``save_checkpoint()`` stopped the function because the driver asked (a shrunk attempt
growing back, an executor being decommissioned:
:class:`~airflow_provider_horovod.runtime.checkpoints.StopAtCheckpoint`): not a failure."""
TIMEOUTS = (START_TIMEOUT, WAITING_FOR_PEERS, TRAINING_TIMEOUT)

_PEER_GONE = ("Connection closed by peer", "Connection reset by peer")
"""What Gloo's errors say when a collective's peer process went away."""

_MARK_START = "<<horovod-rank-failure:"
_MARK_END = ":horovod-rank-failure>>"
_MARK_RE = re.compile(re.escape(_MARK_START) + r"([A-Za-z0-9+/=]+)" + re.escape(_MARK_END))
_RECORD_FIELDS = ("rank", "exit_code", "exc_type", "exc_message", "traceback", "output_tail", "host", "failed_at")
"""The attributes :meth:`RankFailedError.to_dict` records besides ``launcher``, as :func:`rank_failed` takes them."""


class RankFailedError(HorovodRuntimeError):
    """
    A rank (one training process, Horovod's or ``torch.distributed``'s) failed.

    The message names the rank, the exit status (or the signal that killed it), the exception type raised
    by the training function when there was one, and the last lines of that rank's output, which include
    its Python traceback. Bounded (:mod:`~airflow_provider_horovod.runtime.bounds`): the exception message is kept
    to its first :data:`~.bounds.MAX_EXC_MESSAGE_CHARS` characters, the traceback to its last
    :data:`~.bounds.MAX_TRACEBACK_CHARS`, each output line to :data:`~.bounds.MAX_LINE_CHARS`, and the whole message
    to :data:`~.bounds.MAX_MESSAGE_CHARS` (the oldest output lines go first), so a rank that printed or raised
    something huge still gives an error of a readable size that names it.

    :param rank: Horovod rank of the failed process (0 .. np-1).
    :param exit_code: the process exit status; negative values are ``-signal`` as in :mod:`subprocess`.
    :param exc_type: qualified name of the exception the training function raised, if any.
    :param exc_message: ``str()`` of that exception, if any.
    :param traceback: the formatted Python traceback of that exception, if any.
    :param output_tail: the last lines the rank printed (stdout and stderr merged), oldest first.
    :param host: the executor host the rank ran on, if known.
    :param failed_at: when the rank failed (seconds since the epoch, the worker's clock), if known.
    :param launcher: the job's launcher (``"horovod"`` or ``"torch"``), which the message names the rank by.
    """

    def __init__(
        self,
        *,
        rank: int,
        exit_code: int | None,
        exc_type: str | None = None,
        exc_message: str | None = None,
        traceback: str | None = None,
        output_tail: list[str] | None = None,
        host: str | None = None,
        failed_at: float | None = None,
        launcher: str = HOROVOD,
    ) -> None:
        self.rank = rank
        self.launcher = launcher
        self.exit_code = exit_code
        self.exc_type = exc_type
        self.exc_message = None if exc_message is None else cut(exc_message, MAX_EXC_MESSAGE_CHARS)
        self.traceback = (
            None
            if traceback is None
            else keep_end("\n".join(cut(line, MAX_LINE_CHARS) for line in traceback.split("\n")), MAX_TRACEBACK_CHARS)
        )
        self.output_tail: list[str] = []
        self.host = host
        self.failed_at = failed_at
        self.output_tail = self._fit([cut(line, MAX_LINE_CHARS) for line in output_tail or []])
        super().__init__(self._format())

    def _fit(self, tail: list[str]) -> list[str]:
        """The newest lines of ``tail`` that fit in the message beside the headline and the traceback, after a line
        that says how many older ones were left out (so :meth:`to_dict`, the marker, is bounded too)."""
        room = MAX_MESSAGE_CHARS - len(self.headline()) - len(self.traceback or "") - 200
        kept: list[str] = []
        for line in reversed(tail):
            room -= len(line) + 1
            if room < 0:
                return [f"[{len(tail) - len(kept)} older lines left out]", *kept]
            kept.insert(0, line)
        return kept

    @property
    def is_secondary(self) -> bool:
        """
        True when this rank most likely failed *because* another rank did.

        Horovod shuts every rank down when one fails (``HorovodInternalError: Horovod has been shut down``), and
        ``torch.distributed``'s Gloo fails a collective whose peer went away (``DistBackendError``, "Connection
        closed by peer"); such a rank is a bystander, not the root cause. (Ranks the launcher itself stops are never
        reported.)
        """
        if not self.exc_type:
            return False
        if (
            self.exc_type.endswith(("HorovodInternalError", "DistBackendError", "DistNetworkError"))
            or self.exc_type == WAITING_FOR_PEERS
        ):
            return True
        return any(s in (self.exc_message or "") for s in _PEER_GONE)

    @property
    def exit_reason(self) -> str:
        """Human-readable exit status, e.g. ``"exit code 1"`` or ``"killed by signal SIGKILL"``."""
        if self.exit_code is None:
            return "unknown exit status"
        if self.exit_code < 0:
            try:
                name = signal.Signals(-self.exit_code).name
            except ValueError:
                name = str(-self.exit_code)
            return f"killed by signal {name}"
        return f"exit code {self.exit_code}"

    def headline(self) -> str:
        """The first line of the message: which rank, where, and what actually happened to it."""
        where = f" on {self.host}" if self.host else ""
        label = get_launcher(self.launcher).label
        if self.exc_type in TIMEOUTS:  # a limit the launcher enforced
            return f"{label} rank {self.rank}{where} timed out and was stopped: {self.exc_message}"
        if self.exc_type == PEER_LEFT:
            return f"{label} rank {self.rank}{where} was stopped: {self.exc_message}"
        if self.exc_type == STOPPED_AT_CHECKPOINT:  # not a failure: the job starts again from that checkpoint
            return f"{label} rank {self.rank}{where} {self.exc_message}"
        if self.exc_type == LOAD_ERROR:
            return (
                f"{label} rank {self.rank}{where} could not load the training function ({self.exit_reason}): "
                f"{self.exc_message}{_module_hint(self.exc_message)}"
            )
        head = f"{label} rank {self.rank}{where} failed ({self.exit_reason})"
        if self.exc_type == "SystemExit":
            return f"{head}: {self.exc_message}"
        if self.exc_type:
            hint = _module_hint(self.exc_message) if self.exc_type == "ModuleNotFoundError" else ""
            return f"{head}: {self.exc_type}: {self.exc_message}{hint}"
        if self.exit_code is not None and self.exit_code > 0:
            return (
                f"{head}: the process ended without a Python exception from the training function "
                "(os._exit() or a crash in native code)"
            )
        return head

    def _format(self) -> str:
        head = self.headline()
        parts = [head]
        if self.traceback:
            parts.append(f"Traceback of rank {self.rank}:\n{self.traceback.rstrip()}")
        tail = self.output_tail
        if self.traceback:  # the worker also printed its traceback: show it once
            tb_lines = self.traceback.rstrip().splitlines()
            if tail[-len(tb_lines) :] == tb_lines:
                tail = tail[: -len(tb_lines)]
        if tail:
            parts.append(f"Output of rank {self.rank} before that ({len(tail)} lines):\n" + "\n".join(tail))
        return "\n".join(parts)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form, the inverse of :meth:`from_dict`."""
        return {name: getattr(self, name) for name in (*_RECORD_FIELDS, "launcher")}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RankFailedError:
        """Rebuild the error from :meth:`to_dict` output, as the kind of failure it records (:func:`rank_failed`)."""
        fields: dict[str, Any] = {k: data.get(k) for k in _RECORD_FIELDS}
        return rank_failed(**fields, launcher=data.get("launcher") or HOROVOD)

    def marker(self) -> str:
        """
        Encode the error as one token that survives Spark's exception wrapping.

        Spark re-raises an executor-side Python exception on the driver as text inside a
        ``Py4JJavaError``/``PythonException``; :meth:`find_in` recovers the structured error from that text.
        """
        blob = base64.b64encode(json.dumps(self.to_dict()).encode()).decode()
        return f"{_MARK_START}{blob}{_MARK_END}"

    @classmethod
    def find_in(cls, text: str) -> RankFailedError | None:
        """Return the first rank failure encoded in ``text`` by :meth:`marker`, or ``None``."""
        match = _MARK_RE.search(text)
        if match is None:
            return None
        return cls.from_dict(json.loads(base64.b64decode(match.group(1))))


class RankKilledError(RankFailedError):
    """A signal ended the rank's process (its exit status is ``-signal``), with no Python exception of its own: the
    kernel's OOM killer, a ``kill -9``, a crash in native code (SIGSEGV)."""

    @property
    def signal(self) -> signal.Signals | int:
        """The signal, as :class:`signal.Signals` where Python knows its number."""
        assert self.exit_code is not None and self.exit_code < 0
        try:
            return signal.Signals(-self.exit_code)
        except ValueError:
            return -self.exit_code


class RendezvousError(RankFailedError):
    """
    The ranks never all joined: this rank was stopped still loading the function (``start_timeout_s``), or waiting
    in ``hvd.init()`` / ``init_process_group()`` for its peers (``start_timeout_s``), or because a peer ended without
    ever joining. :attr:`exc_type` says which (:data:`START_TIMEOUT`, :data:`WAITING_FOR_PEERS`, :data:`PEER_LEFT`).
    """


RENDEZVOUS_FAILURES = (START_TIMEOUT, WAITING_FOR_PEERS, PEER_LEFT)
"""``exc_type`` values of a rank stopped because the ranks never all joined (:class:`RendezvousError`)."""


def rank_failed(*, rank: int, exit_code: int | None, exc_type: str | None = None, **fields: Any) -> RankFailedError:
    """
    The :class:`RankFailedError` of the kind the facts say: :class:`RendezvousError` when ``exc_type`` is one of
    :data:`RENDEZVOUS_FAILURES`, :class:`RankKilledError` when a signal ended the process (``exit_code < 0``) without
    a Python exception, else :class:`RankFailedError` itself.

    :param rank: the failed rank.
    :param exit_code: its exit status (``-signal`` for a signal).
    :param exc_type: the exception's qualified name or one of this module's ``exc_type`` constants, if any.
    :param fields: the other keyword arguments of :class:`RankFailedError`.
    """
    kind: type[RankFailedError] = RankFailedError
    if exc_type in RENDEZVOUS_FAILURES:
        kind = RendezvousError
    elif exit_code is not None and exit_code < 0 and not exc_type:
        kind = RankKilledError
    return kind(rank=rank, exit_code=exit_code, exc_type=exc_type, **fields)


def _module_hint(message: str | None) -> str:
    """For a missing module: where it is missing and the usual ways to get it there."""
    match = re.search(r"No module named '([^']+)'", message or "")
    if match is None:
        return ""
    return (
        f". If {match.group(1)!r} is importable where the DAG was parsed, this rank's Python lacks it: install "
        "it on the executors, or keep it in the DAG folder and import it at the top of the DAG file (not inside "
        "the function) so it travels with the function by value"
    )


def root_cause(failures: list[RankFailedError]) -> RankFailedError:
    """
    Pick the failure to report among several ranks' failures.

    Primary failures (see :attr:`RankFailedError.is_secondary`) come first, then the earliest, then the lowest
    rank. Ranks fail together because Horovod shuts all of them down once one fails; the first to *exit*
    is often a bystander, so exit order alone would blame the wrong rank. Rank 0's stop at a checkpoint
    (:data:`STOPPED_AT_CHECKPOINT`) comes before everything: the others' errors are its consequences, whatever they say.

    :raises ValueError: ``failures`` is empty.
    """
    if not failures:
        raise ValueError("no failures to choose from")
    chosen = min(
        failures,
        key=lambda f: (
            f.exc_type != STOPPED_AT_CHECKPOINT,
            f.is_secondary,
            f.failed_at if f.failed_at is not None else float("inf"),
            f.rank,
        ),
    )
    never_joined = sorted({f.rank for f in failures if f.exc_type == START_TIMEOUT})
    if never_joined:
        init_call = get_launcher(chosen.launcher).init_call
        chosen.args = (f"{chosen.args[0]}\nRanks that never reached {init_call}: {never_joined}",)
    return chosen
