"""A thread that samples something every few tenths of a second while a measured call runs (B11's and B12's)."""

from __future__ import annotations

import threading
from typing import Self


class Sampler:
    """
    Calls :meth:`_sample` when the context opens, every ``interval_s`` seconds from a thread of its own while it is
    open, and once more when it closes. Subclasses say what a sample is.

    :param interval_s: seconds between samples.
    :param name: the thread's name.
    """

    def __init__(self, interval_s: float, name: str = "bench-sampler") -> None:
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def _sample(self) -> None:
        raise NotImplementedError

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            self._sample()

    def __enter__(self) -> Self:
        self._sample()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()
