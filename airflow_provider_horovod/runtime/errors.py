"""Errors raised by the Spark-side runtime (plain exceptions: this package never imports Airflow).

Hierarchy::

    HorovodRuntimeError (RuntimeError)
    ├── PayloadError        the serialized training function is corrupt, tampered with or incompatible
    ├── LaunchError         the job could not be started (bad plan, not enough slots, Spark refused it)
    │   ├── ExecutorLostError   Spark lost an executor (its JVM or its worker) during the barrier stage
    │   └── JobCancelledError   the barrier job was cancelled from outside the run (the Spark UI's kill link,
    │                           other code cancelling its jobs, the SparkContext stopped)
    ├── RankFailedError     a rank exited non-zero; carries the rank, exit status and output tail
    │   ├── RankKilledError     a signal ended the rank's process (SIGKILL from the OOM killer, a kill -9)
    │   └── RendezvousError     the ranks never all joined (a rank still loading or waiting for its peers
    │                           when ``start_timeout_s`` ran out, or a peer that ended before joining)
    └── ReturnValueTooLargeError  rank 0's return value was above max_return_value_bytes and was not sent

The rank failures (:class:`~airflow_provider_horovod.runtime.rank_errors.RankFailedError` and its kinds, the
``exc_type`` values the launcher gives its own stops, the marker that carries a failure through Spark's exception
text) are in :mod:`airflow_provider_horovod.runtime.rank_errors`. :class:`ReturnValueRefused` is not an error: it is
what rank 0 sends instead of a value that is too large.
"""

from __future__ import annotations

from typing import Any


def type_name(cls: type) -> str:
    """
    The dotted name of ``cls`` as a failing rank reports its exception's type (``exc_type``): builtins without their
    module (``ValueError``), others with it (``torch.OutOfMemoryError``); what ``restart_on`` names are matched with.

    :param cls: a class.
    """
    return f"{cls.__module__}.{cls.__qualname__}".removeprefix("builtins.")


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

    def __init__(
        self,
        message: str,
        *,
        executor: str,
        host: str | None = None,
        rank: int | None = None,
        partition: int | None = None,
        reason: str | None = None,
        exit_code: int | None = None,
    ) -> None:
        super().__init__(message)
        self.executor = executor
        self.host = host
        self.rank = rank
        self.partition = partition
        self.reason = reason
        self.exit_code = exit_code

    def facts(self) -> dict[str, Any]:
        """The loss as JSON-able data: ``executor``, ``host``, ``rank``, ``partition``, ``reason``, ``exit_code``."""
        return {name: getattr(self, name) for name in ("executor", "host", "rank", "partition", "reason", "exit_code")}


class JobCancelledError(LaunchError):
    """
    Spark cancelled the barrier job from outside the run: the Spark UI's kill link on its stage or job, other code on
    the driver cancelling jobs (``SparkContext.cancelAllJobs()``, ``cancelJobGroup()``, ``cancelStage()``), or the
    SparkContext stopped under it (Spark's ``SPARK_JOB_CANCELLED``). The runner itself cancels its job only when it is
    interrupted (``KeyboardInterrupt``, which it re-raises), so this is never the runner's own doing.

    :param message: the whole message.
    :param job_id: Spark's job id, when its message gives one.
    :param reason: Spark's reason (``"because killed via the Web UI"``, ``"part of cancelled job group ..."``).
    """

    def __init__(self, message: str, *, job_id: int | None = None, reason: str | None = None) -> None:
        super().__init__(message)
        self.job_id = job_id
        self.reason = reason

    def facts(self) -> dict[str, Any]:
        """The cancellation as JSON-able data: ``job_id``, ``reason``."""
        return {"job_id": self.job_id, "reason": self.reason}


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
        return (
            f"rank 0's return value (a {self.type_name}) is {self.size} bytes pickled, above "
            f"max_return_value_bytes={self.limit}: it is not sent to the driver"
        )


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
            "of it); the files the ranks wrote are kept"
        )
