"""
What the client-mode hook (:class:`~airflow_provider_horovod.hooks.horovod.HorovodHook`) reads from the driver
program (:mod:`~airflow_provider_horovod.runtime.driver.program`, which spark-submit runs) besides its result: the
line it prints on spark-submit's output once the Spark application exists, and, when the driver's JVM ended first,
the moments its Python program may still need to write ``result.json``.
"""

from __future__ import annotations

import time
from pathlib import Path

from airflow_provider_horovod.runtime.driver.program import APP_MARKER, RESULT_FILE, STATUS_FILE

__all__ = ["DRIVER_RESULT_GRACE_S", "app_started_line", "is_app_started_line", "wait_for_driver_result"]

DRIVER_RESULT_GRACE_S = 10.0
"""How long the hook waits for the Python driver's ``result.json`` once spark-submit has failed: the driver program
is the JVM's child and, when the JVM exits first (``-XX:+ExitOnOutOfMemoryError``), writes it moments later."""


def is_app_started_line(line: str) -> bool:
    """
    Whether ``line`` is the driver program's "Spark application ... started" line.

    :param line: one line of spark-submit's output.
    """
    return APP_MARKER in line


def app_started_line(line: str) -> tuple[str, str | None] | None:
    """
    ``(app_id, ui_url)`` from the driver program's "Spark application ... started; UI ..." line, else ``None``.

    :param line: one line of spark-submit's output.
    :return: the application id and its Spark UI URL (``None`` when the driver has no UI), or ``None`` for any other
        line.
    """
    if APP_MARKER not in line:
        return None
    rest = line.split(APP_MARKER, 1)[1].split()
    return rest[0], rest[3] if len(rest) > 3 and rest[3] != "-" else None


def wait_for_driver_result(staging: Path, timeout_s: float = DRIVER_RESULT_GRACE_S) -> None:
    """
    Wait up to ``timeout_s`` for ``result.json`` in ``staging`` when the driver program started the job
    (``status.json`` is there) but has not written it yet; return at once otherwise.

    :param staging: the driver's result directory.
    :param timeout_s: the longest wait, seconds.
    """
    deadline = time.monotonic() + timeout_s
    while (staging / STATUS_FILE).exists() and not (staging / RESULT_FILE).exists() and time.monotonic() < deadline:
        time.sleep(0.1)
