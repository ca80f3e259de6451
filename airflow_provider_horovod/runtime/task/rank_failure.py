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
) -> RankFailedError:
    """
    The error of a rank that exited with a non-zero status: what its error file says (exception type, message,
    traceback, when it failed), or only the status and output for a rank that died without writing one.

    :param rank: the rank.
    :param exit_code: its exit status (negative: the signal that killed it).
    :param error_path: the error file :func:`~airflow_provider_horovod.runtime.rank.result.error_record` wrote.
    :param host: the rank's host.
    :param output_tail: the rank's last output lines.
    :param exited_at: when the process exit was seen, seconds since the epoch (the failure time of a rank that
        wrote no error file).
    :param launcher_name: the job's launcher.
    """
    details: dict[str, str] = {}
    try:
        with open(error_path, encoding="utf-8") as f:
            details = json.load(f)
    except (OSError, ValueError):
        pass
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
