"""Helpers for the fault-injection suite (``pytest -m faults``)."""

from __future__ import annotations

import psutil
import pytest

from tests.conftest import session_processes


def rank_processes(marker: str) -> list[psutil.Process]:
    """Every live Horovod rank process this test session started."""
    return session_processes(marker, cmdline_contains="airflow_provider_horovod.runtime.rank.worker")


@pytest.fixture
def no_rank_left_behind(session_mark: str):
    """After the test: every rank process is gone within 15 s (they hold GPUs on real clusters)."""
    yield
    _gone, alive = psutil.wait_procs(rank_processes(session_mark), timeout=15)
    assert not alive, f"rank processes left behind: {[p.pid for p in alive]}"
