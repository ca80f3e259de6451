"""Errors raised on the Airflow side of the provider.

Hierarchy::

    AirflowException
    └── HorovodJobError            the Spark job failed; ``.failure`` holds the failing rank's details
        ├── HorovodExecutorLostError  Spark lost an executor (or its worker) mid-training; ``.facts`` say which
        ├── HorovodRankKilledError  a signal ended a rank (the OOM killer, a kill -9, a crash in native code)
        ├── HorovodRendezvousError  the ranks never all joined (start_timeout_s, a peer that left before joining)
        ├── HorovodJobKilledError  the job was killed (its driver or application through the standalone master,
        │                          its Spark job through the Spark UI or other code); ``.facts`` say how
        ├── HorovodResultError     the job succeeded but rank 0's return value cannot go to XCom
        └── HorovodAccessError     a Spark REST server refused the connection's token or certificate (also an
                                   ``AirflowFailException``: the task fails without retries)

The first three are infrastructure failures (``infrastructure`` is ``True``): a retry resumes from the checkpoint;
:func:`~airflow_provider_horovod.retry_policy.training_retry_policy` retries them and fails at once on the training
code's own exception.
"""

from __future__ import annotations

from typing import Any

from airflow.providers.common.compat.sdk import AirflowException, AirflowFailException


class HorovodJobError(AirflowException):
    """
    The Horovod job on Spark failed.

    :param message: what happened, including the failing rank's traceback when a rank failed.
    :param failure: the structured rank failure (``RankFailedError.to_dict()``: rank, exit_code, exc_type,
        exc_message, traceback, output_tail, host), or ``None`` when no rank was at fault.
    :param app_id: the Spark application id, when the application had started.
    """

    infrastructure = False
    """Whether this is a failure nobody's code caused (a lost executor or host, a killed rank, a rendezvous that never
    completed), which a retry from the checkpoint would likely get past: the classification
    :func:`~airflow_provider_horovod.retry_policy.failure_kind` and Airflow 3.3's ``retry_policy`` use."""

    def __init__(self, message: str, *, failure: dict[str, Any] | None = None, app_id: str | None = None) -> None:
        super().__init__(message)
        self.failure = failure
        self.app_id = app_id

    @property
    def rank(self) -> int | None:
        """The failing rank, if a rank failed."""
        return None if self.failure is None else self.failure.get("rank")


class HorovodExecutorLostError(HorovodJobError):
    """
    Spark lost an executor during the barrier stage (its JVM killed, e.g. by the OOM killer, or its worker gone), so
    the stage and every rank with it ended; the driver's
    :class:`~airflow_provider_horovod.runtime.errors.ExecutorLostError` on the Airflow side. With ``retries=`` and
    checkpoints, the next try resumes from the latest checkpoint.

    :param message: the headline (executor, host, rank, Spark's reason) and Spark's account.
    :param facts: ``{"executor": str, "host": str | None, "rank": int | None, "partition": int | None,
        "reason": str | None, "exit_code": int | None}`` (``ExecutorLostError.facts()``).
    :param app_id: the Spark application id.
    """

    infrastructure = True

    def __init__(self, message: str, *, facts: dict[str, Any], app_id: str | None = None) -> None:
        super().__init__(message, app_id=app_id)
        self.facts = dict(facts)

    @property
    def executor(self) -> str | None:
        """Spark's id of the lost executor."""
        return self.facts.get("executor")

    @property
    def rank(self) -> int | None:
        """The rank the lost executor held, when known."""
        return self.facts.get("rank")


class HorovodRankKilledError(HorovodJobError):
    """
    A signal ended a rank's process with no Python exception of its own (the kernel's OOM killer, a ``kill -9``, a
    crash in native code): the driver's :class:`~airflow_provider_horovod.runtime.rank_errors.RankKilledError` on
    the Airflow side. ``failure`` holds the rank's details (its ``exit_code`` is ``-signal``).
    """

    infrastructure = True

    @property
    def signal(self) -> int | None:
        """The signal's number, when the rank's exit status gives one."""
        code = None if self.failure is None else self.failure.get("exit_code")
        return -code if isinstance(code, int) and code < 0 else None


class HorovodRendezvousError(HorovodJobError):
    """
    The ranks never all joined (a rank still loading or waiting for its peers when ``start_timeout_s`` ran out, or a
    peer that ended before joining): the driver's
    :class:`~airflow_provider_horovod.runtime.rank_errors.RendezvousError` on the Airflow side. ``failure`` holds the
    rank's details.
    """

    infrastructure = True


class HorovodJobKilledError(HorovodJobError):
    """
    The job was killed, not ended by a failure of its own: its driver or application killed through the standalone
    master (its REST API's kill, the master UI's kill link, or this task's own ``on_kill``), or its barrier job
    cancelled on the driver (the Spark UI's kill link, other code cancelling its jobs, the SparkContext stopped: the
    driver's :class:`~airflow_provider_horovod.runtime.errors.JobCancelledError`). No rank is blamed (``failure`` is
    ``None``); whether to retry is the DAG's call, as for any kill.

    :param message: the headline (what was killed, through what) and the driver's account, a consequence.
    :param facts: what is known of the kill: for a cancelled job ``{"job_id": int | None, "reason": str | None}``;
        for a kill through the master ``{"submission_id": str, "driver_state": str | None, "app_id": str | None,
        "by": "this task" | "outside"}`` (``"this task"``: its own ``on_kill``).
    :param app_id: the Spark application id.
    """

    def __init__(self, message: str, *, facts: dict[str, Any], app_id: str | None = None) -> None:
        super().__init__(message, app_id=app_id)
        self.facts = dict(facts)


class HorovodResultError(HorovodJobError):
    """Training succeeded but rank 0's return value cannot be stored in XCom (the model files are kept)."""


class HorovodAccessError(HorovodJobError, AirflowFailException):
    """
    A Spark REST server refused access before anything was submitted: HTTP 401/403 from a ``JWSFilter`` (missing or
    wrong bearer token) or a TLS certificate that cannot be verified. The task fails without Airflow's retries: a
    retry would be refused the same way, and never resubmits.
    """
