"""
Make the install checks' kept virtualenvs ahead of the suite, all at once: ``python -m tests.install_venvs``.

``make test`` (scripts/test_all.sh) runs this in the background while the other set-up steps run, so that on a fresh
machine (as CI's) their downloads and installs overlap with the rest of the set-up instead of running one after the
other inside the tests (about 2 minutes each there). Each is made by the same function its test calls
(``kept_dependencies`` of tests/integration/test_without_horovod.py, ``kept_airflow`` of
tests/e2e/test_bring_your_own.py), so the keys agree; tests/kept_venv.py's lock makes a test that gets there first
wait for the one being made. One already made is reused at once. Exits non-zero, naming the virtualenv, when one
could not be made.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tests.e2e.test_bring_your_own import kept_airflow
from tests.integration.test_without_horovod import PYTHONS, kept_dependencies


def _timed(name: str, make: Callable[[], tuple[Path, bool] | None]) -> str:
    started = time.monotonic()
    kept = make()
    if kept is None:
        return f"{name}: skipped (that Python is not installed; its test skips too)"
    venv, fresh = kept
    return f"{name}: {'made' if fresh else 'up to date'} in {time.monotonic() - started:.0f} s ({venv})"


def main() -> int:
    jobs: dict[str, Callable[[], tuple[Path, bool] | None]] = {
        f"nohvd-py{version}": (lambda version=version: kept_dependencies(version)) for version in sorted(PYTHONS)
    }
    jobs["byo"] = kept_airflow
    failed = 0
    with ThreadPoolExecutor(max_workers=len(jobs)) as pool:
        futures = {name: pool.submit(_timed, name, make) for name, make in jobs.items()}
        for name, future in futures.items():
            try:
                print(f"install_venvs: {future.result()}", flush=True)
            except BaseException as err:  # an AssertionError from a failed pip, a timeout: name it, keep the others
                failed += 1
                print(f"install_venvs: {name} could not be made: {type(err).__name__}: {err}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
