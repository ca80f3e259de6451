"""Turning a failed barrier stage into the one error a user should read (shared by classic and Connect runs)."""

from __future__ import annotations

import re
from collections.abc import Callable

from airflow_provider_horovod.runtime.errors import LaunchError, RankFailedError, root_cause

SLOTS_MESSAGE = "requires more slots than the total number of slots"
"""Spark's barrier slot check failure (SPARK-24819)."""


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
    lines = [line for line in text.splitlines()
             if line.strip() and not line.lstrip().startswith("at ") and not _PY4J_CALL.match(line.strip())]
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
    for line in lines[starts[-1] + 1:]:
        if not line.strip() or line.startswith((" ", "\t")):
            continue
        return line.strip().removeprefix(_RUNTIME_ERRORS)
    return None


def raise_for_stage_failure(stage_error: BaseException, reports: list[dict],
                            not_enough_slots: Callable[[], str]) -> None:
    """
    Raise the error that explains a failed barrier stage.

    :param stage_error: what Spark raised on the driver.
    :param reports: failure reports the tasks sent over the log channel (``RankFailedError.to_dict()``).
    :param not_enough_slots: builds the message for Spark's slot check failure.
    :raises RankFailedError: a rank failed on its own (the root cause among all reports).
    :raises LaunchError: Spark could not give the stage its slots, or lost a task (executor or Python worker
        died, stage cancelled); bystander ranks are listed. Its message is never empty: an exception without
        text is named by its type.
    """
    failures = [RankFailedError.from_dict(f) for f in reports]
    in_exception = RankFailedError.find_in(str(stage_error))
    if in_exception is not None:
        failures.append(in_exception)
    if any(not f.is_secondary for f in failures) or (in_exception is not None and not reports):
        raise root_cause(failures) from None
    if SLOTS_MESSAGE in str(stage_error):
        raise LaunchError(not_enough_slots()) from stage_error
    # The first line says why (the task's Python exception; the runtime's own LaunchError as it is), then Spark's
    # account, not Py4J's "An error occurred while calling ...collectAndServe".
    cause = task_exception(str(stage_error))
    # an exception without text (Py4J's, when the driver JVM is gone or out of memory) is named by its type
    details = spark_reason(str(stage_error)) or (f"{type(stage_error).__module__}.{type(stage_error).__qualname__}"
                                                 " (with no message)").removeprefix("builtins.")
    if cause is not None and cause.startswith("LaunchError: "):
        reason = f"{cause.removeprefix('LaunchError: ')}\nSpark's account: {details.splitlines()[0]}"
    elif cause is not None:
        reason = f"the Horovod barrier stage failed: {cause}\nSpark's account: {details}"
    else:
        reason = f"the Horovod barrier stage failed: {details}"
    if failures:
        reason += ("\nRanks stopped as a consequence: "
                   + ", ".join(f"{f.rank} ({f.exc_type})" for f in sorted(failures, key=lambda f: f.rank)))
    raise LaunchError(reason) from stage_error
