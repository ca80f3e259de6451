"""Run a small Python client script in its own interpreter and read back the JSON result it prints."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import NoReturn

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
    path.write_text(source)

    def fail(outcome: str, stdout: bytes | str | None, stderr: bytes | str | None) -> NoReturn:
        out, err = _text(stdout)[-TAIL_CHARS:], _text(stderr)[-TAIL_CHARS:]
        message = f"client script {path} {outcome}\n==> stdout (tail) <==\n{out}\n==> stderr (tail) <==\n{err}"
        raise AssertionError(message + ("\n" + context() if context else ""))

    try:
        proc = subprocess.run([python, str(path), *args], env=env, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired as exc:
        fail(f"was killed after {timeout_s} s", exc.stdout, exc.stderr)
    lines = [line for line in proc.stdout.splitlines() if line.startswith(RESULT_PREFIX)]
    if not lines:
        fail(f"exited with code {proc.returncode} without a {RESULT_PREFIX.strip()} line", proc.stdout, proc.stderr)
    return json.loads(lines[-1][len(RESULT_PREFIX) :]), proc.stdout


def _text(output: bytes | str | None) -> str:
    """Captured output as text: a timeout's partial output is bytes even with ``text=True``."""
    return output.decode(errors="replace") if isinstance(output, bytes) else output or ""
