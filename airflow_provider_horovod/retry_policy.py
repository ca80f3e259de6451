"""
Which failures of a training task Airflow should retry: the infrastructure failures that outlasted ``max_restarts``
(a lost executor or host, a rank killed by a signal, a rendezvous that never completed: a retry resumes from the
checkpoint and would likely succeed), and which it should not (the training code's own exception, which a retry would
raise again; input the operator refused). :func:`training_retry_policy` is that choice as Airflow 3.3's
``retry_policy=`` (evaluated in the task's worker process); :func:`failure_kind` is the same choice as a value, for
Airflow before 3.3 and for callbacks (``on_failure_callback``, alerting).

Where it comes from: Airflow 3.3's retry policies (AIP-105, ``airflow.sdk.definitions.retry_policy``); the split is
the one ``max_restarts`` makes inside a try (:mod:`airflow_provider_horovod.runtime.driver.restarts`).
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any, Literal

from airflow_provider_horovod.exceptions import HorovodJobError, HorovodJobKilledError

if TYPE_CHECKING:
    from airflow.sdk.definitions.retry_policy import RetryPolicy

FailureKind = Literal["infrastructure", "training code", "input", "other"]


def failure_kind(err: BaseException) -> FailureKind:
    """
    What kind of failure ``err`` (what a training task raised) is.

    :param err: the task's exception.
    :return: ``"infrastructure"``: a lost executor or host, a rank killed by a signal, a rendezvous that never
        completed (worth a retry); ``"training code"``: a rank's own Python exception (a retry would raise it again);
        ``"input"``: an argument the operator refused (``ValueError``/``TypeError`` before anything ran);
        ``"other"``: anything else (a submission that failed, a killed job, Airflow's own errors), left to the task's
        ``retries``.
    """
    if isinstance(err, HorovodJobError) and err.infrastructure:  # lost executor, killed rank, rendezvous
        return "infrastructure"
    if isinstance(err, HorovodJobKilledError):
        return "other"  # killed on purpose or by the cluster: the DAG's call, as for any kill
    if isinstance(err, HorovodJobError):
        if not err.failure or not err.failure.get("exc_type"):
            return "other"  # no rank at fault, or one that ended without an exception of its own
        from airflow_provider_horovod.runtime.rank_errors import RankFailedError

        # a bystander's error (Horovod shut down, a collective's peer gone) stands for a cause that went unreported
        return "other" if RankFailedError.from_dict(err.failure).is_secondary else "training code"
    if isinstance(err, ValueError | TypeError):
        return "input"
    return "other"


def training_retry_policy(*, retry_delay: timedelta | None = None) -> RetryPolicy:
    """
    A ``retry_policy=`` for training tasks (Airflow 3.3): retry infrastructure failures (after ``retry_delay``, default
    the task's own), fail at once on the training code's own exception and on refused input, and leave the rest to the
    task's ``retries``. Retries are still bounded by ``retries``.

    .. code-block:: python

        HorovodRunnerOperator(..., max_restarts=2, retries=3, retry_policy=training_retry_policy())

    :param retry_delay: the delay before a retry of an infrastructure failure; ``None``: the task's ``retry_delay``.
    :raises RuntimeError: the installed Airflow has no retry policies (before 3.3); :func:`failure_kind` gives the
        same classification there.
    """
    try:
        from airflow.sdk.definitions.retry_policy import RetryDecision
        from airflow.sdk.definitions.retry_policy import RetryPolicy as _Base
    except ImportError as err:
        raise RuntimeError(
            "training_retry_policy() needs Airflow 3.3 or newer (retry_policy=); with this Airflow, "
            "airflow_provider_horovod.retry_policy.failure_kind(exception) gives the same classification"
        ) from err

    class TrainingRetryPolicy(_Base):
        """Retry infrastructure failures, fail on the training code's own exception and on refused input."""

        def __init__(self, delay: timedelta | None) -> None:
            self.retry_delay = delay

        def evaluate(self, exception: BaseException, try_number: int, max_tries: int, context: Any = None) -> Any:
            kind = failure_kind(exception)
            if kind == "infrastructure":
                return RetryDecision.retry(
                    self.retry_delay,
                    reason=f"{type(exception).__name__}: an infrastructure failure; the retry resumes from the "
                    "latest checkpoint",
                )
            if kind == "training code":
                return RetryDecision.fail(
                    f"{type(exception).__name__}: the training code's own exception; a retry would raise it again"
                )
            if kind == "input":
                return RetryDecision.fail(f"{type(exception).__name__}: the task's input was refused")
            return RetryDecision.default()

        def serialize(self) -> dict[str, Any]:
            delay = None if self.retry_delay is None else self.retry_delay.total_seconds()
            return {"__type": "airflow_provider_horovod.TrainingRetryPolicy", "retry_delay": delay}

    return TrainingRetryPolicy(retry_delay)
