"""
Reading back what the runtime's driver program wrote: the :class:`JobResult` every deploy mode returns.

The driver writes ``result.json`` (status, application id, UI URL, artifact paths, or the failing rank's error)
and ``result.pkl`` (rank 0's cloudpickled return value) into the staging directory it was given; client mode
(:mod:`airflow_provider_horovod.hooks.horovod`), cluster mode (:mod:`airflow_provider_horovod.hooks.standalone`)
and the operator resuming after the trigger read them with :func:`read_job_result`.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from typing import Any

from airflow_provider_horovod.exceptions import HorovodExecutorLostError, HorovodJobError


@dataclass
class JobResult:
    """
    What a successful job brought back.

    :param app_id: Spark application id (``None`` for ``np < 0``, which starts no Spark application).
    :param ui_url: the application's Spark UI URL, if it had one.
    :param artifact_paths: full paths/URIs of every file under the artifact directory, sorted.
    :param return_value: rank 0's cloudpickled return value, or ``None`` if it returned nothing we kept.
    :param metrics: rank 0's last ``report()`` metrics (empty when it reported none).
    """

    app_id: str | None
    ui_url: str | None
    artifact_paths: list[str] = field(default_factory=list)
    return_value: bytes | None = None
    metrics: dict[str, Any] = field(default_factory=dict)



def read_job_result(staging: Any, *, app_id: str | None = None, ui_url: str | None = None,
                    submit_error: BaseException | None = None, headline: str | None = None) -> JobResult:
    """
    Read what the driver program wrote into ``staging`` (``result.json``, ``result.pkl``).

    :param staging: the result directory the driver was given: a local or shared-filesystem path, or a
        :class:`~airflow_provider_horovod.utils.staging.Staging` (object storage too).
    :param app_id: the application id if already known (the file's wins).
    :param ui_url: the Spark UI URL if already known (the file's wins).
    :param submit_error: the submission's own error, if any, kept as the cause.
    :param headline: the cause of a failure from outside the job (the driver was killed through the master), said
        first; the driver's own account, then only a consequence, follows it, and no rank is blamed.
    :raises HorovodExecutorLostError: the driver says Spark lost an executor (``result.json``'s ``kind``), with its
        ``facts``; not when ``headline`` gives an outside cause.
    :raises HorovodJobError: no result was written (the driver never ran the job) or the job failed; the
        message is the driver's (for a rank failure: the rank, its exception and traceback), after ``headline``.
    """
    from airflow_provider_horovod.utils.staging import Staging

    staging = Staging.of(staging)
    try:
        outcome = json.loads(staging.read_bytes("result.json") or b"")
    except (OSError, ValueError):
        what = "the Spark driver ended before running the job (no result was written)"
        raise HorovodJobError(f"{headline}; {what}" if headline else f"{what}: {submit_error}",
                              app_id=app_id) from submit_error
    app_id = outcome.get("app_id") or app_id
    ui_url = outcome.get("ui_url") or ui_url
    if outcome.get("status") != "success":
        message = outcome.get("message") or "the Horovod job failed"
        if headline:
            message = f"{headline}\nThe driver's last error, a consequence of the kill: {message}"
        if outcome.get("artifact_paths"):
            message += "\nFiles under the artifact directory: " + ", ".join(outcome["artifact_paths"])
        # The driver's own account is the whole story; spark-submit's exit status would only repeat it.
        if not headline and outcome.get("kind") == "ExecutorLostError":
            raise HorovodExecutorLostError(message, facts=outcome.get("facts") or {}, app_id=app_id) from None
        raise HorovodJobError(message, failure=None if headline else outcome.get("error"), app_id=app_id) from None
    if submit_error is not None:
        raise HorovodJobError(f"the job finished but spark-submit failed: {submit_error}",
                              app_id=app_id) from submit_error
    value = staging.read_bytes("result.pkl")
    return JobResult(app_id=app_id, ui_url=ui_url, artifact_paths=list(outcome.get("artifact_paths") or []),
                     return_value=value, metrics=dict(outcome.get("metrics") or {}))


def cleanup_staging(path: str) -> None:
    """
    Remove a staging directory made for one submission (errors ignored: it may be gone already).

    :param path: the local directory.
    """
    shutil.rmtree(path, ignore_errors=True)
