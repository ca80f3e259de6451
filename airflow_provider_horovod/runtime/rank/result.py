"""
What a rank writes back to its launcher: rank 0's pickled return value (refused above the job's limit) or the
error file of a failed rank.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

from airflow_provider_horovod.runtime.errors import ReturnValueRefused, type_name


def write_atomic(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file and a rename: a reader sees all of it or nothing."""
    tmp = f"{path}.tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def error_record(exc_type: str, message: str, tb: str) -> bytes:
    """
    The error file's JSON (what :meth:`~airflow_provider_horovod.runtime.task.rank_process.RankProcess.failure`
    reads): ``{"exc_type", "exc_message", "traceback", "failed_at"}``, ``failed_at`` in seconds since the epoch.
    """
    return json.dumps(
        {"exc_type": exc_type, "exc_message": message, "traceback": tb, "failed_at": time.time()}
    ).encode()


def qualname(obj: object) -> str:
    """The dotted name of ``obj``'s type, builtins without their module (``ValueError``, ``numpy.ndarray``)."""
    return type_name(type(obj))


def exit_status(code: object) -> int:
    """The process exit status ``sys.exit(code)`` gives: ``None`` 0, an int itself, anything else 1."""
    if code is None:
        return 0
    if isinstance(code, int) and not isinstance(code, bool):
        return code & 0xFF if code >= 0 else 1
    return 1


class ResultSink:
    """
    The file rank 0's value is pickled into: it keeps the pickle while it is within ``limit`` bytes, then only
    counts it, so a value far above the limit never has a second copy in this process (the pickler streams large
    objects to the file as they are).

    :param limit: the largest pickle kept, bytes; ``None``: no limit.
    """

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self.size = 0
        self._parts: list[bytes] | None = []

    def write(self, data: Any) -> int:
        n = memoryview(data).nbytes
        self.size += n
        if self._parts is not None and self.limit is not None and self.size > self.limit:
            self._parts = None  # over the limit: from here on only counted
        if self._parts is not None:
            self._parts.append(bytes(data))
        return n

    def getvalue(self) -> bytes | None:
        """The pickle, or ``None`` when it was larger than the limit."""
        return None if self._parts is None else b"".join(self._parts)


def pickle_result(value: Any, limit: int | None) -> bytes:
    """
    What rank 0 writes as its result: the cloudpickle of ``value`` or, when that is larger than ``limit``, a pickled
    :class:`~airflow_provider_horovod.runtime.errors.ReturnValueRefused` (the refusal is printed to stderr, which
    the driver's log shows).

    :param value: rank 0's return value.
    :param limit: ``HOROVOD_AIRFLOW_MAX_RESULT_BYTES``, bytes; ``None``: no limit.
    :return: the bytes to write.
    :raises Exception: ``value`` cannot be pickled (what cloudpickle raised).
    """
    import cloudpickle

    sink = ResultSink(limit)
    cloudpickle.dump(value, sink)
    data = sink.getvalue()
    if data is not None:
        return data
    refused = ReturnValueRefused(sink.size, int(limit or 0), qualname(value))
    sys.stderr.write(
        f"airflow-provider-horovod: {refused.describe()}; write large results under artifact_dir() "
        "and return their paths\n"
    )
    sys.stderr.flush()
    return cloudpickle.dumps(refused)
