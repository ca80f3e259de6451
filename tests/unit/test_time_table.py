"""The suite's time table (tests/time_table.py): set-up steps and modules, slowest first, in the output and a file."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO


def _pytest_with_the_table(folder: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    """A pytest run of ``folder``'s tests in a fresh interpreter with the time table plugin."""
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.time_table", "-p", "no:cacheprovider", "-c", os.devnull]
        + ["--rootdir", str(folder), str(folder)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        cwd=folder,
    )


def test_the_table_lists_set_up_steps_and_modules_slowest_first(tmp_path: Path):
    (tmp_path / "test_fast.py").write_text("def test_a():\n    pass\n\ndef test_b():\n    pass\n")
    (tmp_path / "test_slow.py").write_text(
        "import pytest, time\n\n@pytest.fixture(scope='module')\ndef cluster():\n    time.sleep(0.6)\n\n"
        "def test_c(cluster):\n    pass\n"
    )
    setup = tmp_path / "setup.tsv"
    setup.write_text("30\tscripts/setup.sh (./.venv)\n0\tscripts/setup_browser.sh\n")
    table = tmp_path / "table.tsv"
    env = {**os.environ, "APH_SETUP_TIMES": str(setup), "APH_TIME_TABLE": str(table), "PYTHONPATH": str(REPO)}
    proc = _pytest_with_the_table(tmp_path, env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "time table (wall seconds, slowest first)" in proc.stdout, proc.stdout
    rows = [line.split("\t") for line in table.read_text().splitlines()]
    names = [name for _, name, _ in rows]
    assert names == [
        "set-up: scripts/setup.sh (./.venv)",
        "test_slow.py",
        "test_fast.py",
        "set-up: scripts/setup_browser.sh",
    ], rows
    seconds = {name: float(s) for s, name, _ in rows}
    assert seconds["test_slow.py"] >= 0.6  # the module fixture's set-up counts for its module
    assert {name: detail for _, name, detail in rows}["test_fast.py"] == "2 tests"
    assert "set-up 0.5 min" in proc.stdout, proc.stdout  # the steps' sum where no wall time is given


def test_the_set_up_total_is_its_wall_time_when_steps_overlap(tmp_path: Path):
    (tmp_path / "test_one.py").write_text("def test_a():\n    pass\n")
    setup = tmp_path / "setup.tsv"
    # setup.sh 120 s while Keras' 90 s ran in the background: 150 s of wall time, not 210
    setup.write_text("90\tscripts/setup_keras.sh (in the background)\n120\tscripts/setup.sh\n150\t=wall\n")
    env = {**os.environ, "APH_SETUP_TIMES": str(setup), "PYTHONPATH": str(REPO)}
    env.pop("APH_TIME_TABLE", None)
    proc = _pytest_with_the_table(tmp_path, env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "set-up 2.5 min" in proc.stdout, proc.stdout
    assert "=wall" not in proc.stdout, proc.stdout  # not a row of its own
    assert "scripts/setup_keras.sh (in the background)" in proc.stdout, proc.stdout
