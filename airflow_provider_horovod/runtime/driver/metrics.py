"""
:class:`MetricsCollector`: what the driver makes of the ranks' ``report()`` records (see
:mod:`~airflow_provider_horovod.runtime.reports`): the history in ``<artifact_dir>/metrics.jsonl``, the snapshot in
``<artifact_dir>/progress.json`` (:mod:`~airflow_provider_horovod.runtime.wire.progress_format`), and a progress line at
most every ``log_interval_s``.
"""

from __future__ import annotations

import collections
import json
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from airflow_provider_horovod.runtime.artifacts import is_remote, join_location
from airflow_provider_horovod.runtime.bounds import MAX_HEADLINE_CHARS, cut
from airflow_provider_horovod.runtime.wire.progress_format import (
    METRICS_FILE,
    MILESTONE_EVENT,
    PROGRESS_FILE,
    progress_line,
    rank_phase,
)

RATE_WINDOW_S = 30.0
"""The steps per second are measured over rank 0's records of about this many last seconds."""


def _write_text(location: str, text: str, *, append: bool = False, whole: str | None = None) -> None:
    """
    Write ``text`` to a path or an fsspec URI. A local file is replaced whole through a temporary file (readers see
    the old or the new text), or with ``append`` extended by ``text``; object storage has no append: ``whole``
    (the file's full text) is written in one PUT.
    """
    if is_remote(location):
        import fsspec

        # a filesystem made now, from the environment as it is now: fsspec's instance cache would keep one made
        # earlier in this process, with the credentials and endpoint of then
        with fsspec.open(location, "w", skip_instance_cache=True) as f:
            f.write(text if whole is None else whole)
        return
    os.makedirs(os.path.dirname(location) or ".", exist_ok=True)
    if append:
        with open(location, "a", encoding="utf-8") as f:
            f.write(text)
        return
    tmp = os.path.join(os.path.dirname(location), f".{os.path.basename(location)}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, location)


def _print(line: str) -> None:
    sys.stdout.write(f"airflow-provider-horovod: progress: {line}\n")
    sys.stdout.flush()


RESTARTS_METRIC = "restarts"
"""The metric a job's restarts within the try are logged under in its MLflow run: 1 at the step the first restart's
failed attempt reached, 2 at the second's, ..."""


class MetricsCollector:
    """
    Collects one job's ``report()`` records on the driver. Use it as a context manager around the job; call
    :meth:`add` for each record (thread-safe) and :meth:`finish` with how the job ended.

    Files are written from the collector's own thread, never from :meth:`add`: a local artifact directory gets the
    history appended every ``flush_interval_s``; object storage gets the whole history rewritten (one PUT each)
    every ``remote_flush_interval_s``. Both get their final state when the collector closes. Failures to write are
    reported once on stderr and never fail the job.

    :param artifact_dir: where ``metrics.jsonl`` and ``progress.json`` go (a path or an fsspec URI); ``None``:
        no files, only the progress line.
    :param emit: called with each progress line (default: printed to stdout, prefixed
        ``airflow-provider-horovod: progress:``).
    :param log_interval_s: seconds between progress lines at most (a line only when something new came).
    :param flush_interval_s: seconds between writes to a local artifact directory.
    :param remote_flush_interval_s: seconds between writes to object storage.
    :param mirror_dir: another directory (path or URI) that gets a copy of ``progress.json`` (the driver program's
        result directory, which the Airflow side reads in cluster deploy mode).
    :param sink: also gets rank 0's records, from the collector's thread, every ``sink_interval_s`` and at the end
        (an :class:`~airflow_provider_horovod.runtime.mlflow_sink.MlflowMetricsSink`: ``log(records)``, which must
        return at once; its ``close()``, when it has one, is called when the collector closes).
    :param sink_interval_s: seconds between the sink's calls at most.
    :param ranks: the job's number of ranks and ``init_call`` the launcher's init call (``hvd.init()``): with both,
        the ranks' milestones make the phase until the first report (loading, rendezvous, joined:
        :func:`~airflow_provider_horovod.runtime.wire.progress_format.rank_phase`).
    :param init_call: see ``ranks``.
    :param clock: the wall clock (tests).
    """

    def __init__(
        self,
        artifact_dir: str | None,
        *,
        mirror_dir: str | None = None,
        emit: Callable[[str], None] | None = None,
        log_interval_s: float = 5.0,
        flush_interval_s: float = 2.0,
        remote_flush_interval_s: float = 10.0,
        sink: Any = None,
        sink_interval_s: float = 5.0,
        ranks: int | None = None,
        init_call: str | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.artifact_dir = artifact_dir
        self.mirror_dir = mirror_dir
        self._emit = emit or _print
        self._log_interval_s = log_interval_s
        self._flush_interval_s = (
            remote_flush_interval_s if artifact_dir and is_remote(artifact_dir) else flush_interval_s
        )
        self._clock = clock
        self._lock = threading.Lock()
        self._started_at = clock()
        self._history: list[str] = []  # rank 0's records as JSON lines
        self._written = 0  # how many of them are in the local file
        self._last: dict[str, Any] | None = None  # rank 0's newest record
        self._latest: dict[str, Any] = {}  # each metric's newest value (records may carry different metrics)
        self._ranks: dict[str, dict[str, Any]] = {}
        self._window: collections.deque[tuple[float, int]] = collections.deque()
        self._state = "running"
        self._changed = False  # a record came since the last line
        self._dirty = False  # ... since the last write
        self._write_failed = False
        self._sink = sink
        self._sink_interval_s = sink_interval_s
        self._for_sink: list[dict[str, Any]] = []  # rank 0's records the sink has not had yet
        self._resumed: dict[str, Any] | None = None
        self._restarts: list[dict[str, Any]] = []
        self._phase: str | None = None
        self._milestones: dict[int, str] = {}  # each rank's latest milestone
        self._ranks_expected = (ranks, init_call) if ranks and init_call else None
        self._snapshot_written = False
        self._error: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- records ------------------------------------------------------------------------------------------------
    def add(self, record: dict[str, Any]) -> None:
        """
        Take one record (``{"time", "rank", "step", "total_steps", "epoch", "metrics"}``, or an event such as
        ``{"event": "resumed", "rank", "step", "try_number", "saved_by", "location"}``); a malformed one is ignored.

        :param record: what a rank's ``report()`` sent.
        """
        rank = record.get("rank")
        if not isinstance(rank, int):
            return
        if record.get("event") == "resumed":  # load_checkpoint's, rank 0's: kept in the snapshot, not a report
            with self._lock:
                self._resumed = {k: record.get(k) for k in ("step", "try_number", "saved_by", "location")}
                self._changed = self._dirty = True
            return
        if record.get("event") == MILESTONE_EVENT:  # a rank's launcher's: the phase until the first report
            with self._lock:
                self._milestones[rank] = str(record.get("milestone"))
                if self._last is None and self._ranks_expected:
                    self._set_phase(rank_phase(self._milestones, *self._ranks_expected))
            return
        with self._lock:
            self._ranks[str(rank)] = {"step": record.get("step"), "time": record.get("time")}
            if rank == 0:
                self._last = record
                if isinstance(record.get("metrics"), dict):
                    self._latest.update(record["metrics"])
                self._history.append(json.dumps(record, separators=(",", ":")))
                if self._sink is not None:
                    self._for_sink.append(record)
                step, at = record.get("step"), record.get("time")
                if isinstance(step, int) and isinstance(at, int | float):
                    self._window.append((float(at), step))
                    while len(self._window) > 2 and self._window[-1][0] - self._window[0][0] > RATE_WINDOW_S:
                        self._window.popleft()
            self._changed = self._dirty = True

    def restart(self, restart: dict[str, Any]) -> None:
        """
        The job starts again after a failed attempt (``max_restarts``): kept in the snapshot's ``restarts``, in order,
        and given to the sink (an MLflow run) as the metric :data:`RESTARTS_METRIC`, its number at the step the failed
        attempt reached. The ranks' steps, milestones, the rate and ``resumed`` start over with the new attempt (the
        history goes on). Thread-safe.

        :param restart: :meth:`~airflow_provider_horovod.runtime.driver.restarts.Restart.to_dict`.
        """
        with self._lock:
            self._restarts.append(dict(restart))
            if self._sink is not None:  # the run's "restarts" metric: the count, at the step the attempt reached
                at, step = restart.get("at") or self._clock(), restart.get("step") or 0
                self._for_sink.append({"time": at, "step": step, "metrics": {RESTARTS_METRIC: restart.get("number")}})
            self._resumed = None  # the new attempt's rank 0 says where it resumes from
            self._ranks.clear()
            self._milestones.clear()
            self._window.clear()
            self._changed = self._dirty = True

    def phase(self, text: str) -> None:
        """
        Say what the job is doing before the ranks report (``waiting for 2 task slots: ...``, ``starting 2 ranks``):
        the snapshot's ``phase``, which the Airflow UI's page shows until the first report. Thread-safe.

        :param text: one line.
        """
        with self._lock:
            self._set_phase(text)

    def _set_phase(self, text: str) -> None:
        if text != self._phase:
            self._phase = text
            self._changed = self._dirty = True

    def snapshot(self) -> dict[str, Any]:
        """The ``progress.json`` snapshot now (see :mod:`~airflow_provider_horovod.runtime.wire.progress_format`)."""
        with self._lock:
            return self._snapshot()

    def _snapshot(self) -> dict[str, Any]:
        last = self._last or {}
        step, total = last.get("step"), last.get("total_steps")
        rate = None
        if len(self._window) >= 2 and self._window[-1][0] > self._window[0][0]:
            (t0, s0), (t1, s1) = self._window[0], self._window[-1]
            rate = (s1 - s0) / (t1 - t0)
        eta = (total - step) / rate if rate and total is not None and step is not None and rate > 0 else None
        slowest = None
        if step is not None and len(self._ranks) > 1:
            behind = [
                (info["step"], int(r))
                for r, info in self._ranks.items()
                if r != "0" and isinstance(info.get("step"), int)
            ]
            margin = max(1.0, rate or 0.0)  # about a second of steps: the ranks' samples are not simultaneous
            if behind and min(behind)[0] < step - margin:
                slowest = min(behind)[1]
        return {
            "time": self._clock(),
            "started_at": self._started_at,
            "state": self._state,
            "step": step,
            "total_steps": total,
            "epoch": last.get("epoch"),
            "percent": 100.0 * step / total if step is not None and total else None,
            "steps_per_s": rate,
            "eta_s": eta,
            "metrics": dict(self._latest),
            "ranks": {r: dict(v) for r, v in sorted(self._ranks.items(), key=lambda kv: int(kv[0]))},
            "slowest_rank": slowest,
            "resumed": self._resumed,
            "restarts": [dict(r) for r in self._restarts],
            "phase": self._phase,
            "error": self._error,
        }

    @property
    def last_metrics(self) -> dict[str, Any]:
        """Rank 0's last reported value of each metric (empty when it reported none)."""
        with self._lock:
            return dict(self._latest)

    # -- output -------------------------------------------------------------------------------------------------
    def _write(self, final: bool = False) -> None:
        if not self.artifact_dir and not self.mirror_dir:
            return
        with self._lock:
            if not self._dirty and not final:
                return
            snapshot = self._snapshot()
            history = list(self._history)
            written = self._written
            self._dirty = False
        try:
            self._write_files(snapshot, history, written)
            self._written = len(history)
        except Exception as err:  # noqa: BLE001 - the metrics never fail the training
            if not self._write_failed:
                self._write_failed = True
                sys.stderr.write(
                    f"airflow-provider-horovod: cannot write the metrics under {self.artifact_dir}: {err}\n"
                )

    def _write_files(self, snapshot: dict[str, Any], history: list[str], written: int) -> None:
        snapshot_text = json.dumps(snapshot)
        for location in filter(None, (self.artifact_dir, self.mirror_dir)):
            if location == self.artifact_dir and history:
                _write_text(
                    join_location(location, METRICS_FILE),
                    "".join(line + "\n" for line in history[written:]),
                    append=bool(written),
                    whole="".join(line + "\n" for line in history),
                )
            _write_text(join_location(location, PROGRESS_FILE), snapshot_text)
            self._snapshot_written = True

    def _remove_snapshot(self) -> None:
        """Remove the ``progress.json`` the phases wrote: a job that finished without a report leaves no files."""
        for location in filter(None, (self.artifact_dir, self.mirror_dir)):
            path = join_location(location, PROGRESS_FILE)
            try:
                if is_remote(path):
                    import fsspec

                    fs, root = fsspec.core.url_to_fs(path, skip_instance_cache=True)
                    fs.rm(root)
                else:
                    os.remove(path)
            except FileNotFoundError:
                pass
            except Exception as err:  # noqa: BLE001 - the metrics never fail the training
                sys.stderr.write(f"airflow-provider-horovod: cannot remove {path}: {err}\n")

    def _log(self) -> None:
        with self._lock:
            if not self._changed:
                return
            self._changed = False
            line = progress_line(self._snapshot())
        if line is not None:
            self._emit(line)

    def _to_sink(self) -> None:
        if self._sink is None:
            return
        with self._lock:
            records, self._for_sink = self._for_sink, []
        self._sink.log(records)

    def _run(self) -> None:
        next_write = next_log = next_sink = time.monotonic()
        while not self._stop.wait(min(1.0, self._flush_interval_s, self._log_interval_s)):
            now = time.monotonic()
            if now >= next_write:
                self._write()
                next_write = now + self._flush_interval_s
            if now >= next_log:
                self._log()
                next_log = now + self._log_interval_s
            if now >= next_sink:
                self._to_sink()
                next_sink = now + self._sink_interval_s

    def __enter__(self) -> MetricsCollector:
        self._thread = threading.Thread(target=self._run, name="horovod-metrics", daemon=True)
        self._thread.start()
        return self

    def finish(self, state: str, error: str | None = None) -> None:
        """
        Record how the job ended (``"finished"`` or ``"failed"``); the files get it when the collector closes.

        :param state: the job's end.
        :param error: a failed job's headline (the first line of its error), for the snapshot's ``error``.
        """
        with self._lock:
            self._state = state
            if error is not None:
                self._error = cut(error.strip().splitlines()[0] if error.strip() else error, MAX_HEADLINE_CHARS)
            self._dirty = True

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if exc and exc[0] is not None and self._state == "running":
            self.finish("failed")
        self._log()
        self._to_sink()
        if self._sink is not None and hasattr(self._sink, "close"):
            self._sink.close()  # delivers what is left (an MLflow server that was down), within its own bound
        if self._last is not None or self._ranks or self._state == "failed" and self._phase is not None:
            self._write(final=True)  # a failed job keeps its headline even when nothing was reported
        elif self._snapshot_written:
            self._remove_snapshot()  # finished without a report: no files left behind
