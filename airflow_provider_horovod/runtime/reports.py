"""
:func:`report`: the training function's progress and metrics, for the task log, the metrics history and the Airflow
UI. Cheap enough to call every step: it only records the values; a thread of the rank process sends what is pending
to the rank's launcher at most every :data:`SEND_INTERVAL_S`, each metric's newest value at its own step (and the
last ones when the rank ends), so a slow reader never blocks training, let alone a collective. Outside a job (no
launcher) it does nothing.

Where the records go (every deploy mode): rank -> its launcher (a pipe) -> the driver (the job's authenticated log
channel) -> :class:`~airflow_provider_horovod.runtime.driver.metrics.MetricsCollector`, which keeps the history in
``<artifact_dir>/metrics.jsonl``, the latest snapshot in ``<artifact_dir>/progress.json``, and logs a progress line
at most every few seconds.
"""

from __future__ import annotations

import atexit
import json
import math
import os
import threading
import time
from typing import Any

from airflow_provider_horovod.runtime.wire.protocol import ENV_METRICS

SEND_INTERVAL_S = 0.5
"""The most often a rank sends, seconds: a metric reported faster is sampled at this rate (plus its first and last
values)."""


def env_rank() -> int:
    """This process's rank, from the launcher's ``RANK`` (torch) or ``HOROVOD_RANK`` (Horovod); 0 outside a job."""
    for name in ("RANK", "HOROVOD_RANK"):
        if os.environ.get(name, "").isdigit():
            return int(os.environ[name])
    return 0


class _Pending:
    """
    The records a rank has not sent yet, sampled per metric: each metric keeps only its newest value, in the record
    (the ``report()`` call) that reported it, so a metric reported once per send interval is never dropped because
    another one is reported every step. The newest record always stays (it carries the latest step); a record with
    no metric left and not the newest goes; a record put with ``keep`` stays whole.
    """

    def __init__(self) -> None:
        self._records: dict[int, tuple[dict[str, Any], bool]] = {}  # call number -> (record, keep), in order
        self._holder: dict[str, int] = {}  # metric -> the call number whose record holds its newest value
        self._count = 0

    def __bool__(self) -> bool:
        return bool(self._records)

    def put(self, record: dict[str, Any], keep: bool) -> None:
        self._count += 1
        newest, previous = self._count, self._count - 1
        for name in record.get("metrics") or ():
            older = self._holder.get(name)
            if older is not None and older in self._records and not self._records[older][1]:
                self._records[older][0]["metrics"].pop(name, None)
                self._drop_if_empty(older, newest)
            self._holder[name] = newest
        self._records[newest] = (record, keep)
        self._drop_if_empty(previous, newest)

    def _drop_if_empty(self, number: int, newest: int) -> None:
        record, keep = self._records.get(number, ({}, True))
        if not keep and number != newest and not record.get("metrics"):
            del self._records[number]

    def take(self) -> list[dict[str, Any]]:
        """The pending records, oldest first; none are left."""
        records = [record for record, _ in self._records.values()]
        self._records, self._holder = {}, {}
        return records


class _Sender:
    """Keeps a rank's unsent records (:class:`_Pending`) and sends them on the launcher's pipe from its own thread."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        os.set_inheritable(fd, False)  # not into the function's own subprocesses
        self.rank = env_rank()
        self._cond = threading.Condition()
        self._pending = _Pending()
        self._events: list[dict[str, Any]] = []  # never dropped by the throttle, unlike reports
        self._reported: set[str] = set()  # the metrics reported so far: a record with a new one is kept whole
        self._broken = False
        self._thread = threading.Thread(target=self._run, name="horovod-report", daemon=True)
        self._thread.start()
        atexit.register(self.flush)

    def put(self, record: dict[str, Any], keep: bool = False) -> None:
        with self._cond:
            names = set(record.get("metrics") or ())
            keep = keep or not names <= self._reported  # each metric's first value is never sampled away
            self._reported |= names
            self._pending.put(record, keep)
            self._cond.notify()

    def put_event(self, record: dict[str, Any]) -> None:
        with self._cond:
            self._events.append(record)
            self._cond.notify()

    def _take(self) -> list[dict[str, Any]]:
        with self._cond:
            events, self._events = self._events, []
            return events + self._pending.take()

    def _write(self, records: list[dict[str, Any]]) -> None:
        if self._broken or not records:
            return
        try:
            os.write(self._fd, "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in records).encode())
        except OSError:
            self._broken = True  # the launcher is gone: training goes on

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._events:
                    self._cond.wait()
            self._write(self._take())
            time.sleep(SEND_INTERVAL_S)  # the throttle: one send per interval

    def flush(self) -> None:
        """Send the events and the pending records now (at exit: the last report is never lost to the throttle)."""
        self._write(self._take())


_sender: _Sender | None = None
_sender_lock = threading.Lock()


def _get_sender() -> _Sender | None:
    global _sender
    if _sender is None:
        fd = os.environ.get(ENV_METRICS)
        if not fd:
            return None
        with _sender_lock:
            if _sender is None:
                _sender = _Sender(int(fd))
    return _sender


def _number(name: str, value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) and not hasattr(value, "__float__"):
        raise TypeError(
            f"report(): metric {name}={value!r} must be a number (an int, a float, or a one-element tensor/array)"
        )
    number = float(value)
    return number if math.isfinite(number) else None  # JSON has no NaN/Infinity: a diverged loss reads as null


def _count(name: str, value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise TypeError(f"report(): {name} must be a non-negative int or None, got {value!r}")
    return value


def report(
    step: int | None = None,
    total_steps: int | None = None,
    epoch: int | None = None,
    *,
    sample: bool = True,
    **metrics: Any,
) -> None:
    """
    Report this rank's progress and metrics; call it from the training function as often as every step.

    Rank 0's reports make the job's history and the progress line; the other ranks' steps are kept too (only their
    step and epoch), so a straggler shows (``slowest rank 1 at step 1180``). Sampled per metric: a send goes at most
    every :data:`SEND_INTERVAL_S` seconds with each metric's newest value at the step it was reported at, so a metric
    reported at most once an interval (``epoch_loss`` once per epoch beside ``loss`` every step) keeps every value,
    and a faster one keeps about two a second; the first and the last report of each metric are always sent (the
    last at the latest when the rank ends), however fast it reports. A no-op outside a job.

    :param step: the global step (batches done so far), a non-negative int.
    :param total_steps: the steps the training will take in all, for the percentage and the time remaining.
    :param epoch: the current epoch.
    :param sample: ``False``: this record is sent whole, never sampled away (every call costs a JSON line on the
        pipe, the history and the MLflow run: for a few records, not every step).
    :param metrics: metric name to number (``loss=0.12, acc=0.93``); one-element tensors and numpy scalars work.
    :raises TypeError: a metric is not a number, or a count is not a non-negative int.
    """
    sender = _get_sender()
    if sender is None:
        return
    record: dict[str, Any] = {
        "time": time.time(),
        "rank": sender.rank,
        "step": _count("step", step),
        "total_steps": _count("total_steps", total_steps),
        "epoch": _count("epoch", epoch),
    }
    if sender.rank == 0:
        record["metrics"] = {str(k): _number(k, v) for k, v in metrics.items()}
    sender.put(record, keep=not sample)


def send_event(event: str, **fields: Any) -> None:
    """
    Send a one-time event of this rank to the driver, which keeps it in ``progress.json`` (a no-op outside a job).
    Unlike :func:`report` records, events are never dropped by the throttle.

    :param event: its kind, e.g. ``"resumed"`` (:func:`~airflow_provider_horovod.runtime.load_checkpoint`'s).
    :param fields: JSON-able values.
    """
    sender = _get_sender()
    if sender is not None:
        sender.put_event({"event": event, "time": time.time(), "rank": sender.rank, **fields})
