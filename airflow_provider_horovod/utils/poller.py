"""
:class:`Poller`: the background thread the hooks' watchers poll from (Spark's REST API, the standalone master's
state page).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Self

if TYPE_CHECKING:
    from airflow_provider_horovod.clients import SparkRestAccess


Log = Callable[[str], None]
"""What a watcher logs its messages with (e.g. ``operator.log.info``)."""


class Poller:
    """
    A daemon thread, started by :meth:`start` and joined by :meth:`stop`, that runs :meth:`_run`; subclasses poll
    with :meth:`_every_interval`.

    :param thread_name: the thread's name (shows in thread dumps and log records).
    :param poll_interval_s: seconds between two polls.
    :param log: called with each message the watcher logs.
    :param access: the bearer token and CA bundle of the REST calls it makes (``None``: none).
    """

    def __init__(self, thread_name: str, poll_interval_s: float, log: Log, access: SparkRestAccess | None) -> None:
        self._thread_name = thread_name
        self._poll_interval_s = poll_interval_s
        self._log = log
        self._access = access
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> Self:
        """Start polling (the first poll is immediate); return this watcher."""
        self._thread = threading.Thread(target=self._run, name=self._thread_name, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop polling and wait for the thread."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _every_interval(self, poll: Callable[[], None]) -> None:
        """Call ``poll`` now and every ``poll_interval_s`` seconds until :meth:`stop` (which ends the wait at once)."""
        while True:
            poll()
            if self._stop.wait(self._poll_interval_s):
                return

    def _run(self) -> None:
        raise NotImplementedError
