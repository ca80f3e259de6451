"""
The suite's time table: the wall time of each test module and of each set-up step, slowest first.

``make test`` (``scripts/test_all.sh``) times each set-up step into the file named by ``APH_SETUP_TIMES`` (one
``<seconds>\\t<step>`` line per step); this plugin adds each test module's time and prints both, slowest first, at
the end of the run, with the totals. A module's time is the sum of its tests' set-up, call and tear-down durations
as pytest measures them, so it includes the module's own fixtures (a cluster, a deployment) and the first use of a
session fixture. ``APH_TIME_TABLE`` names a file that gets the same table as tab-separated text (the README's
figures come from it). Some set-up steps run in the background beside others; a last ``<seconds>\t=wall`` line
gives the set-up's wall time, which the totals use instead of the steps' sum.
"""

from __future__ import annotations

import os
import time
from collections import defaultdict
from pathlib import Path

import pytest

SETUP_TIMES_ENV = "APH_SETUP_TIMES"
TABLE_FILE_ENV = "APH_TIME_TABLE"


WALL = "=wall"
"""The step name of the set-up's wall time in a set-up times file (its steps overlap)."""


def read_setup_times(path: Path) -> tuple[list[tuple[float, str]], float | None]:
    """``(seconds, step)`` rows of a set-up times file, and the set-up's wall time where the file gives it; a missing
    file has no rows.

    :param path: the file ``scripts/test_all.sh`` writes, ``<seconds>\\t<step>`` per line, ``<seconds>\\t=wall`` last.
    """
    if not path.is_file():
        return [], None
    rows, wall = [], None
    for line in path.read_text().splitlines():
        seconds, _, step = line.partition("\t")
        if step == WALL:
            wall = float(seconds)
        elif step:
            rows.append((float(seconds), f"set-up: {step}"))
    return rows, wall


class TimeTable:
    """Collects each module's time from pytest's reports; prints the table at the end of the session."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.tests: dict[str, int] = defaultdict(int)
        self.started = time.monotonic()

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        module = report.nodeid.split("::", 1)[0]
        self.seconds[module] += report.duration
        if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
            self.tests[module] += 1

    def rows(self) -> list[tuple[float, str, str]]:
        """``(seconds, name, detail)`` for the set-up steps and the modules, slowest first."""
        setup = os.environ.get(SETUP_TIMES_ENV)
        rows = [(s, name, "") for s, name in read_setup_times(Path(setup))[0]] if setup else []
        rows += [(s, module, f"{self.tests[module]} tests") for module, s in self.seconds.items()]
        return sorted(rows, key=lambda row: -row[0])

    def pytest_terminal_summary(self, terminalreporter) -> None:
        rows = self.rows()
        if not rows:
            return
        tests_s = sum(s for s, name, _ in rows if not name.startswith("set-up: "))
        setup = os.environ.get(SETUP_TIMES_ENV)
        wall = read_setup_times(Path(setup))[1] if setup else None
        setup_s = wall if wall is not None else sum(s for s, name, _ in rows if name.startswith("set-up: "))
        width = max(len(name) for _, name, _ in rows)
        terminalreporter.section("time table (wall seconds, slowest first)")
        for seconds, name, detail in rows:
            terminalreporter.write_line(f"{seconds:8.1f} s  {seconds / 60:5.1f} min  {name:<{width}}  {detail}")
        terminalreporter.write_line(
            f"tests {tests_s / 60:.1f} min in {sum(1 for _, n, _ in rows if not n.startswith('set-up: '))} modules"
            + (f", set-up {setup_s / 60:.1f} min, together {(tests_s + setup_s) / 60:.1f} min" if setup_s else "")
            + f"; this pytest session's wall time {(time.monotonic() - self.started) / 60:.1f} min"
        )
        out = os.environ.get(TABLE_FILE_ENV)
        if out:
            Path(out).write_text("".join(f"{seconds:.1f}\t{name}\t{detail}\n" for seconds, name, detail in rows))


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(TimeTable(), "aph-time-table")
