"""Run ``airflow dags test`` as a live subprocess, wait for a line of its log, and clean up after it."""

from __future__ import annotations

import contextlib
import queue
import subprocess
import threading
import time
from collections.abc import Iterator

import psutil

from tests.conftest import VENV_BIN


def cmdline(proc: psutil.Process) -> str:
    """A process's command line, or ``""`` when it exited or is a zombie meanwhile."""
    try:
        return " ".join(proc.cmdline())
    except psutil.Error:
        return ""


class DagProcess:
    """A running ``airflow dags test DAG_ID`` whose output is read line by line."""

    def __init__(self, env: dict[str, str], dag_id: str) -> None:
        self.proc = subprocess.Popen(
            [str(VENV_BIN / "airflow"), "dags", "test", dag_id],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.seen: list[str] = []
        self._lines: queue.Queue = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def wait_for(self, text: str, timeout_s: float = 300) -> None:
        """Block until a log line contains ``text``; fail with the log's tail if the run ends or time runs out."""
        deadline = time.monotonic() + timeout_s
        while True:
            line = self._lines.get(timeout=max(1.0, deadline - time.monotonic()))
            assert line is not None, f"the run ended before {text!r}:\n" + "".join(self.seen[-60:])
            self.seen.append(line)
            if text in line:
                return

    def descendants(self) -> list[psutil.Process]:
        return psutil.Process(self.proc.pid).children(recursive=True)

    def rest_of_log(self) -> str:
        """Wait for the process's output to end and return the whole log."""
        while (line := self._lines.get(timeout=60)) is not None:
            self.seen.append(line)
        return "".join(self.seen)


@contextlib.contextmanager
def dag_process(env: dict[str, str], dag_id: str) -> Iterator[DagProcess]:
    """Start the run; on exit, kill whatever of it is still alive (a failed test leaves nothing behind)."""
    run = DagProcess(env, dag_id)
    try:
        yield run
    finally:
        if run.proc.poll() is None:
            for child in run.descendants():
                with contextlib.suppress(psutil.Error):
                    child.kill()
            run.proc.kill()
            run.proc.wait(timeout=60)
