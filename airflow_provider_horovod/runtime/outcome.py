"""Turning a failed barrier stage into the one error a user should read (shared by classic and Connect runs)."""

from __future__ import annotations

from collections.abc import Callable

from airflow_provider_horovod.runtime.errors import LaunchError, RankFailedError, root_cause

SLOTS_MESSAGE = "requires more slots than the total number of slots"
"""Spark's barrier slot check failure (SPARK-24819)."""


def spark_reason(text: str, n: int = 40) -> str:
    """The informative part of a Py4J/Spark error: the summary line and the Python traceback, not JVM frames."""
    lines = [line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("at ")]
    return "\n".join(lines[:n])


def raise_for_stage_failure(stage_error: BaseException, reports: list[dict],
                            not_enough_slots: Callable[[], str]) -> None:
    """
    Raise the error that explains a failed barrier stage.

    :param stage_error: what Spark raised on the driver.
    :param reports: failure reports the tasks sent over the log channel (``RankFailedError.to_dict()``).
    :param not_enough_slots: builds the message for Spark's slot check failure.
    :raises RankFailedError: a rank failed on its own (the root cause among all reports).
    :raises LaunchError: Spark could not give the stage its slots, or lost a task (executor or Python worker
        died, stage cancelled); bystander ranks are listed.
    """
    failures = [RankFailedError.from_dict(f) for f in reports]
    in_exception = RankFailedError.find_in(str(stage_error))
    if in_exception is not None:
        failures.append(in_exception)
    if any(not f.is_secondary for f in failures) or (in_exception is not None and not reports):
        raise root_cause(failures) from None
    if SLOTS_MESSAGE in str(stage_error):
        raise LaunchError(not_enough_slots()) from stage_error
    reason = f"the Horovod barrier stage failed: {spark_reason(str(stage_error))}"
    if failures:
        reason += ("\nRanks stopped as a consequence: "
                   + ", ".join(f"{f.rank} ({f.exc_type})" for f in sorted(failures, key=lambda f: f.rank)))
    raise LaunchError(reason) from stage_error
