"""
A sampler of every process's command line, for tests that check a secret never shows in ``ps`` (docs/security.md).

::

    with CommandLines(SECRET, record=("SparkSubmit",), env_needles=("HOROVOD_AIRFLOW_PAYLOAD_KEY",)) as ps:
        ...  # the run
    assert ps.samples >= 5 and ps.hits == []
"""

from __future__ import annotations

import contextlib
import threading
import time
from pathlib import Path

import psutil

__all__ = ["CommandLines"]


class CommandLines:
    """
    Samples every process's command line in a bounded polling thread and keeps those holding one of the needles.

    :param needles: strings that must not be on any command line (the secrets).
    :param watched: a file whose permission bits are recorded whenever it exists (:attr:`modes`), or ``None``.
    :param period_s: seconds between two samples.
    :param limit_s: seconds after which the thread stops sampling, stopped or not.
    :param record: substrings of command lines to keep in :attr:`seen` (to show that the processes that matter were
        sampled, e.g. ``"SparkSubmit"``).
    :param env_needles: names of environment variables whose values, in any process whose command line names
        Spark or Horovod, become needles too (a per-job key the test cannot know in advance); the values found are
        in :attr:`env_values`.
    :ivar hits: the command lines (first 300 characters) that held a needle.
    :ivar seen: the command lines (first 4000 characters, once each) that held a ``record`` substring.
    :ivar modes: the permission bits ``watched`` had whenever it existed.
    :ivar samples: how many times every process was looked at.
    """

    def __init__(
        self,
        *needles: str,
        watched: Path | None = None,
        period_s: float = 0.2,
        limit_s: float = 600.0,
        record: tuple[str, ...] = (),
        env_needles: tuple[str, ...] = (),
    ) -> None:
        self.needles = [n for n in needles if n]
        self.watched, self.period_s, self.limit_s = watched, period_s, limit_s
        self.record, self.env_needles = record, env_needles
        self.hits: list[str] = []
        self.seen: list[str] = []
        self.env_values: set[str] = set()
        self.modes: set[int] = set()
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def add(self, needle: str) -> None:
        """Look for ``needle`` as well from the next sample on."""
        self.needles = [*self.needles, needle]

    def _sample(self) -> None:
        for proc in psutil.process_iter(["cmdline"]):
            line = " ".join(proc.info.get("cmdline") or [])
            if self.env_needles and ("spark" in line.lower() or "horovod" in line):  # the job's processes
                with contextlib.suppress(psutil.Error):
                    environ = proc.environ()
                    for name in self.env_needles:
                        value = environ.get(name)
                        if value and value not in self.env_values:
                            self.env_values.add(value)
                            self.add(value)
            if any(needle in line for needle in self.needles):
                self.hits.append(line[:300])
            if any(part in line for part in self.record) and line[:4000] not in self.seen:
                self.seen.append(line[:4000])
        if self.watched is not None:
            with contextlib.suppress(FileNotFoundError):
                self.modes.add(self.watched.stat().st_mode & 0o777)
        self.samples += 1

    def _run(self) -> None:
        deadline = time.monotonic() + self.limit_s
        while not self._stop.is_set() and time.monotonic() < deadline:
            self._sample()
            self._stop.wait(self.period_s)

    def __enter__(self) -> CommandLines:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
