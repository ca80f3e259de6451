"""Run a small Python client script in its own interpreter and read back the JSON result it prints."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

RESULT_PREFIX = "RESULT "
"""The script reports its result by printing a line ``RESULT <json>``; the last such line counts."""
TAIL_CHARS = 4000
"""How much of the end of the script's stdout, and of its stderr, goes into a failure message."""


def run_client_script(
    source: str,
    path: Path,
    args: Sequence[str] = (),
    *,
    timeout_s: float,
    env: Mapping[str, str] | None = None,
    context: Callable[[], str] | None = None,
    python: str = sys.executable,
) -> tuple[dict, str]:
    """
    Write ``source`` to ``path``, run it with ``python`` (default: this interpreter) and parse its result line.

    :param source: the script's text; it prints its result as a line ``RESULT <json>``.
    :param path: where to write the script (overwritten if it exists).
    :param args: command-line arguments for the script (its ``sys.argv[1:]``).
    :param timeout_s: seconds the script may run before it is killed.
    :param env: the script's environment (default: this process's).
    :param context: called only on failure; what it returns (e.g. a cluster's log tails) ends the message.
    :param python: the interpreter to run it with (e.g. the Keras environment's).
    :returns: the JSON value of the last ``RESULT`` line, and the script's whole stdout.
    :raises AssertionError: when the script prints no ``RESULT`` line or runs past ``timeout_s``; the message
        has the exit code (or the timeout), the tails of stdout and stderr, and ``context()``.
    """
    return BackgroundScript(source, path, args, timeout_s=timeout_s, env=env, context=context, python=python).run()


class BackgroundScript:
    """
    A client script (see :func:`run_client_script`) that a test can start, act on while it runs (kill an executor,
    freeze a host, start a worker), and stop: use it as a context manager (leaving kills the script if it still
    runs); :meth:`start`, then :meth:`wait_for_file` for a file the job writes, then :meth:`join` for its result.

    :param source: the script's text; the other parameters are :func:`run_client_script`'s.
    """

    def __init__(
        self,
        source: str,
        path: Path,
        args: Sequence[str] = (),
        *,
        timeout_s: float,
        env: Mapping[str, str] | None = None,
        context: Callable[[], str] | None = None,
        python: str = sys.executable,
    ) -> None:
        self._source, self._path, self._timeout_s, self._context = source, path, timeout_s, context
        self._command = [python, str(path), *args]
        self._env = env
        self._proc: subprocess.Popen | None = None
        self._outcome: tuple[dict, str] | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._finish, name=f"client-script-{path.name}", daemon=True)

    def __enter__(self) -> BackgroundScript:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
        self._thread.join(timeout=60)

    def start(self) -> BackgroundScript:
        """Write the script and start it; returns itself."""
        self._path.write_text(self._source)
        self._proc = subprocess.Popen(
            self._command, env=self._env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        self._thread.start()
        return self

    def run(self) -> tuple[dict, str]:
        """Start the script and wait for it: its result and stdout (:func:`run_client_script`)."""
        with self:
            return self.join(self._timeout_s + 60)

    def _finish(self) -> None:
        assert self._proc is not None
        try:
            stdout, stderr = self._proc.communicate(timeout=self._timeout_s)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            stdout, stderr = self._proc.communicate()
            self._error = self._failure(f"was killed after {self._timeout_s} s", stdout, stderr)
            return
        lines = [line for line in stdout.splitlines() if line.startswith(RESULT_PREFIX)]
        if not lines:
            outcome = f"exited with code {self._proc.returncode} without a {RESULT_PREFIX.strip()} line"
            self._error = self._failure(outcome, stdout, stderr)
            return
        self._outcome = json.loads(lines[-1][len(RESULT_PREFIX) :]), stdout

    def _failure(self, outcome: str, stdout: str | None, stderr: str | None) -> AssertionError:
        out, err = _text(stdout)[-TAIL_CHARS:], _text(stderr)[-TAIL_CHARS:]
        message = f"client script {self._path} {outcome}\n==> stdout (tail) <==\n{out}\n==> stderr (tail) <==\n{err}"
        return AssertionError(message + ("\n" + self._context() if self._context else ""))

    def wait_for_file(self, path: Path, timeout_s: float) -> None:
        """
        Return once ``path`` exists and is not empty (a file the job writes when it reaches a point).

        :raises AssertionError: the script ended first (with its error), or ``timeout_s`` passed.
        """
        deadline = time.monotonic() + timeout_s
        while not (path.exists() and path.stat().st_size > 0):
            if not self._thread.is_alive():
                self._thread.join()
                raise AssertionError(f"the script ended before {path.name} came: {self._error or self._outcome}")
            assert time.monotonic() < deadline, f"{path.name} did not come within {timeout_s:.0f} s"
            time.sleep(0.2)  # polls a file the job writes, bounded by the deadline

    def join(self, timeout_s: float) -> tuple[dict, str]:
        """
        Wait for the script; its result and stdout.

        :raises AssertionError: it is still running after ``timeout_s``, or it failed (no result line, killed at its
            own ``timeout_s``).
        """
        self._thread.join(timeout=timeout_s)
        if self._thread.is_alive():
            raise AssertionError(f"the client script {self._path} did not end within {timeout_s:.0f} s")
        if self._error is not None:
            raise self._error
        assert self._outcome is not None
        return self._outcome


def read_jsonl(path: Path) -> list[dict]:
    """The complete lines of a JSON-lines file that another process may be appending to (a line being written is left
    out); ``[]`` before the file exists."""
    return [json.loads(line) for line in path.read_text().split("\n")[:-1]] if path.exists() else []


def _text(output: bytes | str | None) -> str:
    """Captured output as text: a timeout's partial output is bytes even with ``text=True``."""
    return output.decode(errors="replace") if isinstance(output, bytes) else output or ""
