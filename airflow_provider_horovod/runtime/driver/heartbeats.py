"""
Telling a stopped barrier task from a slow one sooner than Spark does (``heartbeat_timeout_s``).

Every barrier task sends a heartbeat over the job's log channel every
:data:`~airflow_provider_horovod.runtime.wire.logs.HEARTBEAT_INTERVAL_S` seconds while its rank runs
(:class:`~airflow_provider_horovod.runtime.wire.logs.Heartbeats`). A task that ends, or whose process dies, closes its
connection, and Spark learns of a dead executor within seconds. What neither shows is a task that stops without
dying: its host frozen, partitioned from the driver or powered off, its executor hung. Spark marks such an executor
lost only after ``spark.network.timeout`` (120 s by default) without its heartbeat, and the other ranks wait in their
collective until Gloo's timeout. The driver's :class:`Watchdog` instead treats a task that sent no heartbeat for
``heartbeat_timeout_s`` as lost: it cancels the barrier job, asks the cluster manager to kill that task's executor and
start a replacement (Spark's own remedy for an executor whose heartbeats expired), and the attempt fails with an
:class:`~airflow_provider_horovod.runtime.errors.ExecutorLostError`, which ``max_restarts`` restarts.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from airflow_provider_horovod.runtime.errors import ExecutorLostError

WATCH_INTERVAL_S = 1.0
"""How often the watchdog looks at the heartbeats, seconds."""


class HeartbeatWatch:
    """
    The last heartbeat of each barrier task of one attempt (thread-safe; fed by the log server's threads).

    :param timeout_s: seconds without a heartbeat after which a task is silent.
    :param clock: a monotonic clock, seconds (tests).
    """

    def __init__(self, timeout_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.timeout_s = timeout_s
        self._clock = clock
        self._lock = threading.Lock()
        self._seen: dict[int, tuple[float, dict[str, Any]]] = {}
        self._ended: set[int] = set()

    def record(self, heartbeat: dict[str, Any]) -> None:
        """
        Take one heartbeat, or the end of a task's connection.

        :param heartbeat: ``{"task": partition, "rank": ..., "host": ..., "stage": ..., "pid": ...}``, or
            ``{"task": partition, "ended": True}`` when its connection closed (the task ended, or its process died:
            Spark tells that).
        """
        task = heartbeat.get("task")
        if not isinstance(task, int):
            return
        with self._lock:
            if heartbeat.get("ended"):
                self._ended.add(task)
            elif task not in self._ended:
                self._seen[task] = (self._clock(), heartbeat)

    def silent(self) -> list[tuple[dict[str, Any], float]]:
        """The tasks still running whose last heartbeat is older than the timeout: ``(heartbeat, seconds silent)``."""
        now = self._clock()
        with self._lock:
            return [
                (beat, now - at)
                for task, (at, beat) in sorted(self._seen.items())
                if task not in self._ended and now - at > self.timeout_s
            ]


def executor_of_task(sc: Any, stage: int, task: int) -> tuple[str | None, str | None]:
    """
    The executor id and host that run barrier task ``task`` of stage ``stage``, from the driver's status store (the
    monitoring REST API's source); ``(None, None)`` when it does not know.

    :param sc: the ``SparkContext``.
    :param stage: the stage id (a barrier stage has one attempt).
    :param task: the task's index (partition).
    """
    try:
        tasks = sc._jsc.sc().statusStore().taskList(stage, 0, task + 64)
        for i in range(tasks.size()):
            data = tasks.apply(i)
            if data.index() == task:
                return str(data.executorId()), str(data.host())
    except Exception:  # noqa: BLE001 - names for the message and the kill only
        pass
    return None, None


class Watchdog:
    """
    Watches one attempt's heartbeats in a thread; on a silent task, stops the attempt.

    Use as a context manager around the blocking ``collect()``; afterwards :attr:`lost` says whether it fired, and
    :meth:`error` is the attempt's error.

    :param watch: the attempt's heartbeats.
    :param cancel: cancels the attempt's barrier job (``sc.cancelJobGroup(group)``).
    :param locate: ``(stage, task) -> (executor id, host)`` (:func:`executor_of_task`).
    :param replace: asks the cluster manager to kill an executor and start another in its place (best effort).
    :param interval_s: seconds between looks.
    """

    def __init__(
        self,
        watch: HeartbeatWatch,
        cancel: Callable[[], None],
        locate: Callable[[int, int], tuple[str | None, str | None]],
        replace: Callable[[str], None],
        interval_s: float = WATCH_INTERVAL_S,
    ) -> None:
        self.watch = watch
        self._cancel = cancel
        self._locate = locate
        self._replace = replace
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="horovod-heartbeat-watchdog", daemon=True)
        self.lost: tuple[dict[str, Any], float, str | None, str | None] | None = None
        """``(heartbeat, seconds silent, executor, host)`` of the task that made it fire, else ``None``."""

    def __enter__(self) -> Watchdog:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            silent = self.watch.silent()
            if not silent:
                continue
            beat, silence_s = silent[0]
            executor, host = self._locate(int(beat.get("stage", -1)), int(beat["task"]))
            self.lost = (beat, silence_s, executor, host or beat.get("host"))
            self._cancel()
            if executor is not None:
                try:
                    self._replace(executor)
                except Exception:  # noqa: BLE001 - Spark frees the slot itself after spark.network.timeout
                    pass
            return

    def error(self) -> ExecutorLostError:
        """The attempt's error once it fired (:attr:`lost` is set)."""
        assert self.lost is not None, "the watchdog did not fire"
        beat, silence_s, executor, host = self.lost
        rank = beat.get("rank")
        reason = f"no heartbeat for {silence_s:.0f} s"
        where = f"barrier task {beat['task']}" + (f", rank {rank}" if rank is not None else "")
        replaced = (
            f"; executor {executor} was killed and another requested in its place"
            if executor is not None
            else "; Spark frees its slot once spark.network.timeout passes"
        )
        message = (
            f"Spark's executor {executor or '(unknown)'}{f' on {host}' if host else ''} ({where}) sent no heartbeat "
            f"for {silence_s:.0f} s (heartbeat_timeout_s={self.watch.timeout_s:g}): its host or executor stopped "
            f"(frozen, cut off from the driver, or gone) without Spark noticing yet. The barrier job was cancelled"
            f"{replaced}. With max_restarts the job starts again; else retry the task (retries=) and, with "
            "checkpoints, the next try resumes from the latest one"
        )
        return ExecutorLostError(
            message,
            executor=executor or "unknown",
            host=host,
            rank=rank if isinstance(rank, int) else None,
            partition=int(beat["task"]),
            reason=reason,
        )
