"""
Bounds on the text a job carries: a rank's output line in the task log, and an error's message.

A rank may print anything, once (a 20 MB line of a tensor's repr, then an exception); without a bound that line
becomes a 20 MB task-log line, and the error that quotes the rank's last lines a 20 MB exception that then travels
into XCom, OpenLineage events and MLflow tags. PySpark's ``TorchDistributor`` cuts output lines at 4,000 characters.
Here:

- a line of rank output is cut at :data:`MAX_LINE_CHARS` where it reaches the task log, with the number of
  characters cut and where the whole line is (the executor's stderr, or a file for ranks whose output is the task
  log itself: :class:`LongLines`);
- a :class:`~airflow_provider_horovod.runtime.rank_errors.RankFailedError` keeps at most :data:`MAX_MESSAGE_CHARS` in
  all: the headline with the exception's type and the start of its message (:data:`MAX_EXC_MESSAGE_CHARS`), the
  traceback's last :data:`MAX_TRACEBACK_CHARS` (its last frames, where the exception was raised), then as many of
  the rank's last output lines as fit.

Stdlib only (it runs in the ranks' launchers and the driver).
"""

from __future__ import annotations

import os
import tempfile
import threading

MAX_LINE_CHARS = 16 * 1024
"""A rank's output line in the task log (and in an error's output tail), characters."""
MAX_EXC_MESSAGE_CHARS = 8 * 1024
"""The exception message an error's headline quotes, characters (its start is kept)."""
MAX_TRACEBACK_CHARS = 32 * 1024
"""The traceback an error carries, characters (its end is kept: the frames where the exception was raised)."""
MAX_MESSAGE_CHARS = 64 * 1024
"""A whole error message (headline, traceback, output tail), characters."""
MAX_HEADLINE_CHARS = 1000
"""An error's headline where one line is shown (``progress.json``'s ``error``, the Training progress page)."""


def cut(text: str, limit: int, where: str = "") -> str:
    """
    ``text`` within ``limit`` characters, a note included: its start is kept. Cutting a cut text again changes
    nothing.

    :param text: the text.
    :param limit: the most characters returned (at least 100 more than ``where``).
    :param where: where the whole text is, for the note (``"the executor's stderr"``); empty: not said.
    :return: ``text`` itself when it fits, else its start and `` … [N characters cut; the whole line is in <where>]``.
    """
    if len(text) <= limit:
        return text
    note = f"; the whole line is in {where}" if where else ""
    keep = limit - 80 - len(where)
    return f"{text[:keep]} … [{len(text) - keep} characters cut{note}]"


def keep_end(text: str, limit: int) -> str:
    """
    ``text`` within ``limit`` characters: its end is kept, after a line that says how much was cut. Cutting a cut
    text again changes nothing.

    :param text: the text (a traceback).
    :param limit: the most characters returned (at least 100).
    """
    if len(text) <= limit:
        return text
    keep = limit - 40
    return f"[{len(text) - keep} characters cut] …\n{text[-keep:]}"


class LongLines:
    """
    Keeps the whole of each line cut on its way to the task log, for ranks whose output is the task log itself
    (ranks on the driver, an embedded ``local[N]`` master's executors): appended to ``rank-<r>.log`` in a
    directory made on the first cut line (``horovod-long-lines-*`` in the system's temporary directory), which is
    never removed by the job. Thread-safe.
    """

    def __init__(self) -> None:
        self._dir: str | None = None
        self._lock = threading.Lock()

    def line(self, rank: int, text: str) -> str:
        """
        The line for the task log: ``text`` itself when it fits, else cut, naming the file that has it whole.

        :param rank: the rank that printed it.
        :param text: the line, without its newline.
        """
        if len(text) <= MAX_LINE_CHARS:
            return text
        try:
            with self._lock:
                if self._dir is None:
                    self._dir = tempfile.mkdtemp(prefix="horovod-long-lines-")
                path = os.path.join(self._dir, f"rank-{rank}.log")
                with open(path, "a", encoding="utf-8", errors="replace") as f:
                    f.write(text + "\n")
        except OSError:
            return cut(text, MAX_LINE_CHARS)
        return cut(text, MAX_LINE_CHARS, where=path)
