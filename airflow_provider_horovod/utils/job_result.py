"""
Reading back what the runtime's driver program wrote: the :class:`JobResult` every deploy mode returns.

The driver writes ``result.json`` (status, application id, UI URL, artifact paths, or the failing rank's error)
and ``result.pkl`` (rank 0's cloudpickled return value) into the staging directory it was given; client mode
(:mod:`airflow_provider_horovod.hooks.horovod`), cluster mode (:mod:`airflow_provider_horovod.standalone.hook`)
and the operator resuming after the trigger read them with :func:`read_job_result`.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from airflow_provider_horovod.exceptions import (
    HorovodExecutorLostError,
    HorovodJobError,
    HorovodJobKilledError,
    HorovodRankKilledError,
    HorovodRendezvousError,
)
from airflow_provider_horovod.runtime.driver.program import RESULT_FILE, VALUE_FILE

_RANK_KINDS: dict[str, type[HorovodJobError]] = {
    "RankKilledError": HorovodRankKilledError,
    "RendezvousError": HorovodRendezvousError,
}
_FACT_KINDS: dict[str, type[HorovodExecutorLostError | HorovodJobKilledError]] = {
    "ExecutorLostError": HorovodExecutorLostError,
    "JobCancelledError": HorovodJobKilledError,
}
"""The driver's errors that carry ``facts()`` (their class names, as ``result.json``'s ``kind``), by Airflow twin."""


def facts_job_error(
    kind: str | None, message: str, facts: dict[str, Any] | None, *, app_id: str | None = None
) -> HorovodJobError | None:
    """
    The Airflow-side twin of a driver error that carries facts (:data:`_FACT_KINDS`): ``ExecutorLostError`` ->
    :class:`HorovodExecutorLostError`, ``JobCancelledError`` -> :class:`HorovodJobKilledError`; ``None`` for any
    other ``kind``.

    :param kind: the driver error's class name (``result.json``'s ``kind``, or ``type(err).__name__``).
    :param message: the error's message.
    :param facts: its ``facts()``.
    :param app_id: the Spark application id.
    """
    twin = _FACT_KINDS.get(kind or "")
    return None if twin is None else twin(message, facts=facts or {}, app_id=app_id)


def rank_job_error(message: str, failure: dict[str, Any] | None, *, app_id: str | None = None) -> HorovodJobError:
    """
    The Airflow-side error of a failed job, of the kind its rank failure is
    (:func:`~airflow_provider_horovod.runtime.rank_errors.rank_failed`): :class:`HorovodRankKilledError`,
    :class:`HorovodRendezvousError`, else :class:`HorovodJobError`.

    :param message: the error's message.
    :param failure: the failing rank's ``RankFailedError.to_dict()``, or ``None`` when no rank was at fault.
    :param app_id: the Spark application id.
    """
    kind = HorovodJobError
    if failure:
        from airflow_provider_horovod.runtime.rank_errors import RankFailedError

        kind = _RANK_KINDS.get(type(RankFailedError.from_dict(failure)).__name__, HorovodJobError)
    return kind(message, failure=failure, app_id=app_id)


class Kill(NamedTuple):
    """
    A job killed from outside it (its driver killed through the standalone master, by this task's ``on_kill`` or by
    someone else): the cause :func:`read_job_result` says first.

    :param headline: what was killed, by whom and through what.
    :param facts: ``{"submission_id", "driver_state", "app_id", "by"}`` (``by``: ``"this task"`` or ``"outside"``),
        the :class:`~airflow_provider_horovod.exceptions.HorovodJobKilledError`'s ``facts``.
    """

    headline: str
    facts: dict[str, Any]


@dataclass
class JobResult:
    """
    What a successful job brought back.

    :param app_id: Spark application id (``None`` for ``np < 0``, which starts no Spark application).
    :param ui_url: the application's Spark UI URL, if it had one.
    :param artifact_paths: full paths/URIs of every file under the artifact directory, sorted.
    :param return_value: rank 0's cloudpickled return value, or ``None`` if it returned nothing we kept.
    :param metrics: rank 0's last ``report()`` metrics (empty when it reported none).
    :param restarts: the job's restarts within the try (``max_restarts``), in order: ``{"number", "cause",
        "error", "at", "backoff_s", "step"}`` each; empty when its first attempt ended it.
    """

    app_id: str | None
    ui_url: str | None
    artifact_paths: list[str] = field(default_factory=list)
    return_value: bytes | None = None
    metrics: dict[str, Any] = field(default_factory=dict)
    restarts: list[dict[str, Any]] = field(default_factory=list)


def read_job_result(
    staging: Any,
    *,
    app_id: str | None = None,
    ui_url: str | None = None,
    submit_error: BaseException | None = None,
    killed: Kill | None = None,
) -> JobResult:
    """
    Read what the driver program wrote into ``staging`` (``result.json``, ``result.pkl``).

    :param staging: the result directory the driver was given: a local or shared-filesystem path, or a
        :class:`~airflow_provider_horovod.utils.staging.Staging` (object storage too).
    :param app_id: the application id if already known (the file's wins).
    :param ui_url: the Spark UI URL if already known (the file's wins).
    :param submit_error: the submission's own error, if any, kept as the cause.
    :param killed: the job was killed (its driver through the master): said first; the driver's own account, then
        only a consequence, follows it, and no rank is blamed.
    :raises HorovodJobKilledError: ``killed`` (with its ``facts``), or the driver says Spark cancelled the job from
        outside the run (``result.json``'s ``kind`` ``JobCancelledError``, with its ``facts``).
    :raises HorovodExecutorLostError: the driver says Spark lost an executor (``result.json``'s ``kind``), with its
        ``facts``; not when the job was ``killed``.
    :raises HorovodJobError: no result was written (the driver never ran the job) or the job failed; the
        message is the driver's (for a rank failure: the rank, its exception and traceback), after ``killed``'s
        headline; of the rank failure's kind (:func:`rank_job_error`).
    """
    from airflow_provider_horovod.utils.staging import Staging

    staging = Staging.of(staging)
    try:
        outcome = json.loads(staging.read_bytes(RESULT_FILE) or b"")
    except (OSError, ValueError):
        what = "the Spark driver ended before running the job (no result was written)"
        if killed is not None:
            raise HorovodJobKilledError(
                f"{killed.headline}; {what}", facts=killed.facts, app_id=app_id
            ) from submit_error
        raise HorovodJobError(f"{what}: {submit_error}", app_id=app_id) from submit_error
    app_id = outcome.get("app_id") or app_id
    ui_url = outcome.get("ui_url") or ui_url
    if outcome.get("status") != "success":
        message = outcome.get("message") or "the Horovod job failed"
        if killed is not None:
            message = f"{killed.headline}\nThe driver's last error, a consequence of the kill: {message}"
        if outcome.get("artifact_paths"):
            message += "\nFiles under the artifact directory: " + ", ".join(outcome["artifact_paths"])
        # The driver's own account is the whole story; spark-submit's exit status would only repeat it.
        if killed is not None:
            raise HorovodJobKilledError(message, facts=killed.facts, app_id=app_id) from None
        error = facts_job_error(outcome.get("kind"), message, outcome.get("facts"), app_id=app_id)
        raise error or rank_job_error(message, outcome.get("error"), app_id=app_id) from None
    if submit_error is not None:
        raise HorovodJobError(
            f"the job finished but spark-submit failed: {submit_error}", app_id=app_id
        ) from submit_error
    value = staging.read_bytes(VALUE_FILE)
    return JobResult(
        app_id=app_id,
        ui_url=ui_url,
        artifact_paths=list(outcome.get("artifact_paths") or []),
        return_value=value,
        metrics=dict(outcome.get("metrics") or {}),
        restarts=list(outcome.get("restarts") or []),
    )


def cleanup_staging(path: str) -> None:
    """
    Remove a staging directory made for one submission (errors ignored: it may be gone already).

    :param path: the local directory.
    """
    shutil.rmtree(path, ignore_errors=True)
