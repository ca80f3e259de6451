"""Errors raised by the Spark-side runtime (plain exceptions: this package never imports Airflow).

Hierarchy::

    HorovodRuntimeError (RuntimeError)
    ├── PayloadError        the serialized training function is corrupt, tampered with or incompatible
    ├── LaunchError         the job could not be started (bad plan, not enough slots, Spark refused it)
    │   └── ExecutorLostError   Spark lost an executor (its JVM or its worker) during the barrier stage
    ├── RankFailedError     a rank exited non-zero; carries the rank, exit status and output tail
    │   ├── RankKilledError     a signal ended the rank's process (SIGKILL from the OOM killer, a kill -9)
    │   └── RendezvousError     the ranks never all joined (a rank still loading or waiting for its peers
    │                           when ``start_timeout_s`` ran out, or a peer that ended before joining)
    └── ReturnValueTooLargeError  rank 0's return value was above max_return_value_bytes and was not sent

:class:`ReturnValueRefused` is not an error: it is what rank 0 sends instead of a value that is too large.
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
TIMEOUTS = (START_TIMEOUT, WAITING_FOR_PEERS, TRAINING_TIMEOUT)

_PEER_GONE = ("Connection closed by peer", "Connection reset by peer")
"""What Gloo's errors say when a collective's peer process went away."""

_MARK_START = "<<horovod-rank-failure:"
_MARK_END = ":horovod-rank-failure>>"
_MARK_RE = re.compile(re.escape(_MARK_START) + r"([A-Za-z0-9+/=]+)" + re.escape(_MARK_END))


class HorovodRuntimeError(RuntimeError):
    """Base class of every error raised by :mod:`airflow_provider_horovod.runtime`."""


class PayloadError(HorovodRuntimeError):
    """The training payload cannot be used: corrupt, tampered with, or made by another Python/cloudpickle."""


class LaunchError(HorovodRuntimeError):
    """The Horovod job could not be launched (invalid plan, missing slots, Spark refused the stage)."""


class ExecutorLostError(LaunchError):
    """
    Spark lost an executor during the barrier stage (its JVM killed or out of memory, its worker or host gone), so
    Spark aborted the stage and stopped the other ranks (a barrier stage is never re-attempted). The message is the
    headline of :func:`~airflow_provider_horovod.runtime.driver.outcome.lost_executor` and Spark's account; the facts
    are attributes, for code that acts on the loss (a retry, a restart) without reading the message.

    :param message: the whole message.
    :param executor: Spark's executor id (``"0"``).
    :param host: the executor's host, when Spark's status store still knew it.
    :param rank: the rank the executor held, when the other ranks' reports single it out.
    :param partition: the barrier task (partition) Spark names as failed first.
    :param reason: Spark's reason (``"Command exited with code 137"``), ``None`` when it gave none (a lost worker).
    :param exit_code: the executor process's exit status, when the reason gives one (137: SIGKILL).
    """

    def __init__(self, message: str, *, executor: str, host: str | None = None, rank: int | None = None,
                 partition: int | None = None, reason: str | None = None, exit_code: int | None = None) -> None:
        super().__init__(message)
        self.executor = executor
        self.host = host
        self.rank = rank
        self.partition = partition
        self.reason = reason
        self.exit_code = exit_code

    def facts(self) -> dict[str, Any]:
        """The loss as JSON-able data: ``executor``, ``host``, ``rank``, ``partition``, ``reason``, ``exit_code``."""
        return {"executor": self.executor, "host": self.host, "rank": self.rank, "partition": self.partition,
                "reason": self.reason, "exit_code": self.exit_code}


class ReturnValueRefused:
    """
    What rank 0 sends back instead of a return value whose pickle is larger than the job's limit
    (``max_return_value_bytes``): a few bytes, so nothing large crosses the executor's and the driver's JVMs. The
    value itself is dropped on rank 0; the files the ranks wrote stay where they are.

    :param size: the size of the value's cloudpickle, bytes.
    :param limit: the limit it exceeded, bytes.
    :param type_name: the qualified name of the value's type, e.g. ``"bytes"`` or ``"numpy.ndarray"``.
    """

    def __init__(self, size: int, limit: int, type_name: str) -> None:
        self.size = size
        self.limit = limit
        self.type_name = type_name

    def __repr__(self) -> str:
        return f"ReturnValueRefused(size={self.size}, limit={self.limit}, type_name={self.type_name!r})"

    def describe(self) -> str:
        """
        The refusal in a sentence, for logs (rank 0 prints it before it ends).

        :return: e.g. ``"rank 0's return value (a bytes) is 120000009 bytes pickled, above
            max_return_value_bytes=67108864: it is not sent to the driver"``.
        """
        return (f"rank 0's return value (a {self.type_name}) is {self.size} bytes pickled, above "
                f"max_return_value_bytes={self.limit}: it is not sent to the driver")


class ReturnValueTooLargeError(HorovodRuntimeError):
    """
    Rank 0 returned a value whose pickle is larger than ``HorovodRunner(max_return_value_bytes=...)``. Rank 0
    refused it before sending it (a value that size would go through the executor's and the driver's JVM memory);
    the job itself ended normally and every file the ranks wrote is kept.

    :param refused: what rank 0 sent instead of the value.
    """

    def __init__(self, refused: ReturnValueRefused) -> None:
        self.size = refused.size
        self.limit = refused.limit
        self.type_name = refused.type_name
        super().__init__(
            f"rank 0 returned {refused.size} bytes once pickled (a {refused.type_name}), above "
            f"max_return_value_bytes={refused.limit}; it was not sent to the driver. Write large results (models, "
            "tensors, data) under artifact_dir() and return their paths, or raise max_return_value_bytes (the "
            "value then travels through the executor's and the driver's JVM memory, which must hold a few copies "
            "of it); the files the ranks wrote are kept")


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
        self.traceback = None if traceback is None else keep_end(
            "\n".join(cut(line, MAX_LINE_CHARS) for line in traceback.split("\n")), MAX_TRACEBACK_CHARS)
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
        if self.exc_type.endswith(("HorovodInternalError", "DistBackendError", "DistNetworkError")) \
                or self.exc_type == WAITING_FOR_PEERS:
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
        if self.exc_type == LOAD_ERROR:
            return (f"{label} rank {self.rank}{where} could not load the training function ({self.exit_reason}): "
                    f"{self.exc_message}{_module_hint(self.exc_message)}")
        head = f"{label} rank {self.rank}{where} failed ({self.exit_reason})"
        if self.exc_type == "SystemExit":
            return f"{head}: {self.exc_message}"
        if self.exc_type:
            hint = _module_hint(self.exc_message) if self.exc_type == "ModuleNotFoundError" else ""
            return f"{head}: {self.exc_type}: {self.exc_message}{hint}"
        if self.exit_code is not None and self.exit_code > 0:
            return (f"{head}: the process ended without a Python exception from the training function "
                    "(os._exit() or a crash in native code)")
        return head

    def _format(self) -> str:
        head = self.headline()
        parts = [head]
        if self.traceback:
            parts.append(f"Traceback of rank {self.rank}:\n{self.traceback.rstrip()}")
        tail = self.output_tail
        if self.traceback:  # the worker also printed its traceback: show it once
            tb_lines = self.traceback.rstrip().splitlines()
            if tail[-len(tb_lines):] == tb_lines:
                tail = tail[: -len(tb_lines)]
        if tail:
            parts.append(f"Output of rank {self.rank} before that ({len(tail)} lines):\n" + "\n".join(tail))
        return "\n".join(parts)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form, the inverse of :meth:`from_dict`."""
        return {
            "rank": self.rank,
            "exit_code": self.exit_code,
            "exc_type": self.exc_type,
            "exc_message": self.exc_message,
            "traceback": self.traceback,
            "output_tail": self.output_tail,
            "host": self.host,
            "failed_at": self.failed_at,
            "launcher": self.launcher,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RankFailedError:
        """Rebuild the error from :meth:`to_dict` output, as the kind of failure it records (:func:`rank_failed`)."""
        return rank_failed(**{k: data.get(k) for k in ("rank", "exit_code", "exc_type", "exc_message",
                                                         "traceback", "output_tail", "host", "failed_at")},
                           launcher=data.get("launcher") or HOROVOD)

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
    return (f". If {match.group(1)!r} is importable where the DAG was parsed, this rank's Python lacks it: install "
            "it on the executors, or keep it in the DAG folder and import it at the top of the DAG file (not inside "
            "the function) so it travels with the function by value")


def root_cause(failures: list[RankFailedError]) -> RankFailedError:
    """
    Pick the failure to report among several ranks' failures.

    Primary failures (see :attr:`RankFailedError.is_secondary`) come first, then the earliest, then the lowest
    rank. Ranks fail together because Horovod shuts all of them down once one fails; the first to *exit*
    is often a bystander, so exit order alone would blame the wrong rank.

    :raises ValueError: ``failures`` is empty.
    """
    if not failures:
        raise ValueError("no failures to choose from")
    chosen = min(failures, key=lambda f: (f.is_secondary, f.failed_at if f.failed_at is not None else float("inf"),
                                          f.rank))
    never_joined = sorted({f.rank for f in failures if f.exc_type == START_TIMEOUT})
    if never_joined:
        init_call = get_launcher(chosen.launcher).init_call
        chosen.args = (f"{chosen.args[0]}\nRanks that never reached {init_call}: {never_joined}",)
    return chosen
