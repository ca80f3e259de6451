"""
The limits a rank runs under (:func:`next_deadline`) and the
:class:`~airflow_provider_horovod.runtime.rank_errors.RankFailedError` its end turns into, of its kind
(:func:`~airflow_provider_horovod.runtime.rank_errors.rank_failed`): a limit it ran into (:func:`timeout_failure`) or
its non-zero exit with the error file it wrote (:func:`exit_failure`).
"""

from __future__ import annotations

import json
import time

from airflow_provider_horovod.runtime.launchers import HOROVOD
from airflow_provider_horovod.runtime.rank_errors import (
    PEER_LEFT,
    START_TIMEOUT,
    TRAINING_TIMEOUT,
    WAITING_FOR_PEERS,
    RankFailedError,
    rank_failed,
)
from airflow_provider_horovod.runtime.wire.jobspec import JobSpec

FAILURE_GRACE_S = 10.0
"""After a rank fails, how long to wait for the others' own failure reports before stopping them."""


def next_deadline(
    spec: JobSpec, phase: str, started_at: float, init_entered_at: float | None
) -> tuple[float, str] | None:
    """
    The next limit a rank can run into, as ``(time.monotonic() value, which)`` (``which`` as
    :func:`timeout_failure` takes it); ``None`` when the job sets no limit that applies now.

    :param spec: the job (``start_timeout_s``, ``training_timeout_s``, seconds).
    :param phase: the rank's phase (``starting``, ``running``, ``init``, ``ready``).
    :param started_at: when the rank was started (or released), ``time.monotonic()``.
    :param init_entered_at: when it last entered ``hvd.init()`` (``init_process_group()``), ``time.monotonic()``;
        ``None`` before that.
    """
    limits: list[tuple[float, str]] = []
    if spec.settings.start_timeout_s is not None:
        if phase == "starting":
            limits.append((started_at + spec.settings.start_timeout_s, "start"))
        elif phase == "init" and init_entered_at is not None:
            # Waiting in hvd.init() (init_process_group()) means another rank is late: give that rank
            # FAILURE_GRACE_S to be reported first, as the one that never joined.
            limits.append((init_entered_at + spec.settings.start_timeout_s + FAILURE_GRACE_S, "init"))
    if spec.settings.training_timeout_s is not None:
        limits.append((started_at + spec.settings.training_timeout_s, "training"))
    return min(limits) if limits else None


def timeout_failure(
    which: str,
    *,
    rank: int,
    spec: JobSpec,
    peer_left: str | None,
    exit_code: int | None,
    host: str | None,
    output_tail: list[str],
) -> RankFailedError:
    """
    The error of a rank its launcher stopped at a limit.

    :param which: the limit: ``training`` (``training_timeout_s``), ``start`` (loading the function within
        ``start_timeout_s``), ``init`` (waiting in ``hvd.init()``, or ``init_process_group()``, for the other ranks
        past ``start_timeout_s``) or ``peer`` (a peer ended without ever joining while this rank waited there).
    :param rank: the rank.
    :param spec: the job (its timeouts, in seconds, are named in the message; its launcher names the call).
    :param peer_left: with ``which="peer"``: why the peer left.
    :param exit_code: the stopped process's exit status.
    :param host: the rank's host.
    :param output_tail: the rank's last output lines.
    """
    init = spec.launcher.init_call
    if which == "training":
        kind, message = (
            TRAINING_TIMEOUT,
            (f"rank {rank} was still running when training_timeout_s={spec.settings.training_timeout_s:g} ran out"),
        )
    elif which == "peer":
        kind, message = PEER_LEFT, f"{peer_left}, so rank {rank} waited for it in {init} in vain"
    elif which == "start":
        kind, message = (
            START_TIMEOUT,
            (
                f"rank {rank} never reached {init} within start_timeout_s="
                f"{spec.settings.start_timeout_s:g}: it was still loading the training "
                "function (unpickling, imports)"
            ),
        )
    else:
        kind, message = (
            WAITING_FOR_PEERS,
            (
                f"rank {rank} was waiting in {init} for the other ranks when "
                f"start_timeout_s={spec.settings.start_timeout_s:g} ran out"
            ),
        )
    return rank_failed(
        rank=rank,
        exit_code=exit_code,
        host=host,
        exc_type=kind,
        exc_message=message,
        output_tail=output_tail,
        failed_at=time.time(),
        launcher=spec.launcher.name,
    )


def exit_failure(
    *,
    rank: int,
    exit_code: int | None,
    error_path: str,
    host: str | None,
    output_tail: list[str],
    exited_at: float | None,
    launcher_name: str = HOROVOD,
    framework_error_path: str | None = None,
) -> RankFailedError:
    """
    The error of a rank that exited with a non-zero status: what its error file says (exception type, message,
    traceback, when it failed); where it wrote none, what its framework's error file says (torchrun's
    ``TORCHELASTIC_ERROR_FILE``, which ``torch.distributed.elastic``'s ``@record`` writes: a script that recorded its
    exception and then exited); or only the status and output for a rank that died without writing either.

    :param rank: the rank.
    :param exit_code: its exit status (negative: the signal that killed it).
    :param error_path: the error file :func:`~airflow_provider_horovod.runtime.rank.result.error_record` wrote.
    :param host: the rank's host.
    :param output_tail: the rank's last output lines.
    :param exited_at: when the process exit was seen, seconds since the epoch (the failure time of a rank that
        wrote no error file).
    :param launcher_name: the job's launcher.
    :param framework_error_path: the framework's error file of the rank, ``None`` where its launcher has none.
    """
    details = _read_json(error_path)
    if not details.get("exc_type") and framework_error_path is not None:
        details = torchelastic_error(_read_json(framework_error_path))
    return rank_failed(
        rank=rank,
        exit_code=exit_code,
        host=host,
        exc_type=details.get("exc_type"),
        exc_message=details.get("exc_message"),
        traceback=details.get("traceback"),
        output_tail=output_tail,
        failed_at=details.get("failed_at", exited_at),
        launcher=launcher_name,
    )


def _read_json(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def torchelastic_error(record: dict) -> dict:
    """
    A ``TORCHELASTIC_ERROR_FILE`` record (``{"message": {"message": "Type: text", "extraInfo": {"py_callstack",
    "timestamp"}}}``, as ``torch.distributed.elastic.multiprocessing.errors.ErrorHandler`` writes it) in the form of
    the rank's own error file: ``exc_type``, ``exc_message``, ``traceback``, ``failed_at``.

    :param record: the file's JSON; a record of another form gives ``{}``.
    """
    message = record.get("message")
    if not isinstance(message, dict) or not isinstance(message.get("message"), str):
        return {}
    exc_type, _, exc_message = message["message"].partition(": ")
    info = message.get("extraInfo")
    extra: dict = info if isinstance(info, dict) else {}
    details: dict = {"exc_type": exc_type, "exc_message": exc_message, "traceback": extra.get("py_callstack")}
    try:
        details["failed_at"] = float(extra["timestamp"])
    except (KeyError, TypeError, ValueError):
        pass
    return details
