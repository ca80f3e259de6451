"""Turning a failed barrier stage into the one error a user should read (shared by classic and Connect runs)."""

from __future__ import annotations

import re
from collections.abc import Callable

from airflow_provider_horovod.runtime.bounds import MAX_MESSAGE_CHARS, cut
from airflow_provider_horovod.runtime.errors import ExecutorLostError, JobCancelledError, LaunchError
from airflow_provider_horovod.runtime.rank_errors import RankFailedError, root_cause

SLOTS_MESSAGE = "requires more slots than the total number of slots"
"""Spark's barrier slot check failure (SPARK-24819)."""


_EXECUTOR_LOST = re.compile(
    r"ExecutorLostFailure \(executor (?P<id>\S+) exited (?P<cause>[^)]*)\)"
    r"(?: Reason: (?P<reason>[^\n]*))?"
)
_EXIT_CODE = re.compile(r"exited with code (?P<code>\d+)\s*$")
_BARRIER_TASK = re.compile(r"barrier task \w+Task\(\d+, (?P<partition>\d+)\) finished unsuccessfully")
_JOB_CANCELLED = re.compile(r"Job (?P<job>\d+) cancelled(?: (?P<reason>.*?))?(?:\s+SQLSTATE: \w+)?\s*$", re.MULTILINE)
"""Spark's ``SPARK_JOB_CANCELLED``: ``Job 3 cancelled because killed via the Web UI``."""
_PY4J_CALL = re.compile(r"^An error occurred while calling \S+$")
_RUNTIME_ERRORS = "airflow_provider_horovod.runtime.errors."
_TRACEBACK = "Traceback (most recent call last):"


def spark_reason(text: str, n: int = 40) -> str:
    """
    The informative part of a Py4J/Spark error: the summary line and the Python traceback, not JVM frames.

    :param text: ``str()`` of what Spark raised on the driver.
    :param n: at most this many lines are kept.
    :return: the lines, without Py4J's ``An error occurred while calling ...collectAndServe.`` preamble.
    """
    lines = [
        line
        for line in text.splitlines()
        if line.strip() and not line.lstrip().startswith("at ") and not _PY4J_CALL.match(line.strip())
    ]
    if lines and lines[0].startswith(": "):  # Py4J puts the Java exception on a line of its own after ": "
        lines[0] = lines[0][2:]
    return "\n".join(lines[:n])


def task_exception(text: str) -> str | None:
    """
    The Python exception a barrier task died of, as ``Type: message``, from Spark's account of the failure.

    Spark embeds the Python worker's traceback in its error; the exception is the first unindented line after
    the last ``Traceback (most recent call last):``. The runtime's own errors (``LaunchError``,
    ``PayloadError``) lose their module path.

    :param text: ``str()`` of what Spark raised on the driver.
    :return: the exception line, or ``None`` when the text carries no Python traceback (an executor lost, a
        Python worker that crashed).
    """
    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines) if line.rstrip().endswith(_TRACEBACK)]
    if not starts:
        return None
    for line in lines[starts[-1] + 1 :]:
        if not line.strip() or line.startswith((" ", "\t")):
            continue
        return line.strip().removeprefix(_RUNTIME_ERRORS)
    return None


def lost_executor(
    text: str, reports: list[dict], np: int | None = None, executor_host: Callable[[str], str | None] | None = None
) -> ExecutorLostError | None:
    """
    The error of a barrier stage that failed because Spark lost an executor (its JVM killed, out of memory, its
    worker gone), its message the headline and its attributes the facts, or ``None`` when Spark's account says
    something else.

    Spark aborts a barrier result stage on its first lost task ("Could not recover from a failed barrier ResultStage")
    and kills the other tasks, whose ranks die with them; it never re-attempts it
    (``spark.stage.maxConsecutiveAttempts`` and ``spark.task.maxFailures`` do not apply), so the failure reaches the
    caller, e.g. Airflow, whose retry resumes from the checkpoint.

    :param text: ``str()`` of what Spark raised on the driver (``ExecutorLostFailure (executor 1 exited caused by one
        of the running tasks) Reason: Command exited with code 137``).
    :param reports: the failure reports of the ranks that were stopped (``RankFailedError.to_dict()``): with ``np``,
        the one rank among ``0 .. np-1`` that sent none is the lost executor's.
    :param np: the job's number of ranks.
    :param executor_host: the host of an executor id, from Spark's status store (``None`` when unknown).
    """
    match = _EXECUTOR_LOST.search(text)
    if match is None:
        return None
    executor = match.group("id")
    host = None
    if executor_host is not None:
        try:
            host = executor_host(executor)
        except Exception:  # noqa: BLE001 - a name for the message only (Spark Connect: no JVM to ask)
            host = None
    partition = int(m.group("partition")) if (m := _BARRIER_TASK.search(text)) else None
    where = [] if partition is None else [f"barrier task {partition}"]
    missing = sorted(set(range(np)) - {r.get("rank") for r in reports}) if np else []
    rank = missing[0] if len(missing) == 1 else None
    if rank is not None:
        where.append(f"rank {rank}")
    given = (match.group("reason") or "").strip() or None
    reason = given or "no reason given"
    exit_code = int(code.group("code")) if (code := _EXIT_CODE.search(reason)) else None
    which = f" ({', '.join(where)})" if where else ""
    hint = ": SIGKILL, e.g. the kernel's OOM killer or a kill -9" if exit_code == 137 else ""
    headline = (
        f"Spark lost executor {executor}{f' on {host}' if host else ''}{which} during the barrier stage: "
        f"{reason}{hint} (exited {match.group('cause')}). The other ranks were stopped and Spark does not "
        "re-attempt a barrier stage: retry the task (retries=) and, with checkpoints, the next try resumes "
        "from the latest one"
    )
    return ExecutorLostError(
        headline, executor=executor, host=host, rank=rank, partition=partition, reason=given, exit_code=exit_code
    )


def cancelled_job(text: str) -> JobCancelledError | None:
    """
    The error of a barrier job Spark cancelled from outside the run (the Spark UI's kill link, other code's
    ``cancelAllJobs()``/``cancelJobGroup()``/``cancelStage()``, the SparkContext stopped), or ``None`` when Spark's
    account says something else. The runner cancels its own job only when interrupted, and re-raises that.

    :param text: ``str()`` of what Spark raised on the driver (``[SPARK_JOB_CANCELLED] Job 3 cancelled because
        killed via the Web UI SQLSTATE: XXKDA``).
    """
    match = _JOB_CANCELLED.search(text)
    if match is None:
        return None
    reason = (match.group("reason") or "").strip() or None
    headline = (
        f"Spark cancelled the barrier job (job {match.group('job')}) from outside this run"
        f"{f': {reason}' if reason else ''}. Its ranks were stopped; the Spark UI's kill link, other code "
        "cancelling this application's jobs, or the SparkContext stopping do this"
    )
    return JobCancelledError(headline, job_id=int(match.group("job")), reason=reason)


def raise_for_stage_failure(
    stage_error: BaseException,
    reports: list[dict],
    not_enough_slots: Callable[[], str],
    *,
    np: int | None = None,
    executor_host: Callable[[str], str | None] | None = None,
) -> None:
    """
    Raise the error that explains a failed barrier stage.

    :param stage_error: what Spark raised on the driver.
    :param reports: failure reports the tasks sent over the log channel (``RankFailedError.to_dict()``).
    :param not_enough_slots: builds the message for Spark's slot check failure.
    :param np: the job's number of ranks (names the lost executor's rank, :func:`lost_executor`).
    :param executor_host: the host of an executor id (:func:`lost_executor`).
    :raises RankFailedError: a rank failed on its own (the root cause among all reports).
    :raises ExecutorLostError: Spark lost an executor (:func:`lost_executor`); the headline names it, its host, its
        rank and Spark's reason, then Spark's account and the ranks stopped as a consequence.
    :raises JobCancelledError: Spark cancelled the job from outside the run (:func:`cancelled_job`), with Spark's
        reason; the ranks' ends are its consequences.
    :raises LaunchError: Spark could not give the stage its slots, or lost a task (a Python worker died, the stage
        was cancelled); bystander ranks are listed. Its message is never empty: an exception without text is named
        by its type.
    """
    failures = [RankFailedError.from_dict(f) for f in reports]
    in_exception = RankFailedError.find_in(str(stage_error))
    if in_exception is not None:
        failures.append(in_exception)
    # Spark's first failed task is the root cause when it is a lost executor: the ranks' reports are its consequences
    lost = lost_executor(str(stage_error), reports, np, executor_host)
    # ... and so is a cancellation: the ranks it stopped report their ends (a signal) as failures of their own
    cancelled = cancelled_job(str(stage_error)) if lost is None else None
    if (
        lost is None
        and cancelled is None
        and (any(not f.is_secondary for f in failures) or (in_exception is not None and not reports))
    ):
        raise root_cause(failures) from None
    if SLOTS_MESSAGE in str(stage_error):
        raise LaunchError(not_enough_slots()) from stage_error
    # The first line says why (the task's Python exception; the runtime's own LaunchError as it is), then Spark's
    # account, not Py4J's "An error occurred while calling ...collectAndServe".
    cause = task_exception(str(stage_error))
    # an exception without text (Py4J's, when the driver JVM is gone or out of memory) is named by its type
    details = spark_reason(str(stage_error)) or (
        f"{type(stage_error).__module__}.{type(stage_error).__qualname__} (with no message)"
    ).removeprefix("builtins.")
    if lost is not None:
        reason = f"{lost}\nSpark's account: {details}"
    elif cancelled is not None:
        reason = f"{cancelled}\nSpark's account: {details.splitlines()[0]}"
    elif cause is not None and cause.startswith("LaunchError: "):
        reason = f"{cause.removeprefix('LaunchError: ')}\nSpark's account: {details.splitlines()[0]}"
    elif cause is not None:
        reason = f"the Horovod barrier stage failed: {cause}\nSpark's account: {details}"
    else:
        reason = f"the Horovod barrier stage failed: {details}"
    if failures:
        reason += "\nRanks stopped as a consequence: " + ", ".join(
            f"{f.rank} ({f.exc_type})" for f in sorted(failures, key=lambda f: f.rank)
        )
    if lost is not None:
        raise ExecutorLostError(cut(reason, MAX_MESSAGE_CHARS), **lost.facts()) from stage_error
    if cancelled is not None:
        raise JobCancelledError(cut(reason, MAX_MESSAGE_CHARS), **cancelled.facts()) from stage_error
    raise LaunchError(cut(reason, MAX_MESSAGE_CHARS)) from stage_error  # Spark's account can be long
