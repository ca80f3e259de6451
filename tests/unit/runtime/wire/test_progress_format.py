"""The progress line of the task log (runtime/wire/progress_format.py)."""

from __future__ import annotations

from airflow_provider_horovod.runtime.wire.progress_format import progress_line


def test_with_total_steps_the_line_has_percent_rate_eta_metrics_and_the_straggler():
    snapshot = {
        "time": 100.0,
        "started_at": 40.0,
        "state": "running",
        "step": 1200,
        "total_steps": 3000,
        "epoch": None,
        "percent": 40.0,
        "steps_per_s": 85.0,
        "eta_s": 21.2,
        "metrics": {"loss": 0.12, "acc": 0.93},
        "ranks": {"0": {"step": 1200}, "1": {"step": 1180}},
        "slowest_rank": 1,
    }
    assert progress_line(snapshot) == (
        "step 1200/3000 (40%) 85 steps/s, ETA 21 s; loss 0.12 acc 0.93; slowest rank 1 at step 1180"
    )


def test_without_total_steps_it_shows_rate_and_elapsed_time():
    snapshot = {
        "time": 175.0,
        "started_at": 40.0,
        "state": "running",
        "step": 90,
        "total_steps": None,
        "epoch": 2,
        "percent": None,
        "steps_per_s": 1.5,
        "eta_s": None,
        "metrics": {"loss": None},
        "ranks": {},
        "slowest_rank": None,
    }
    assert progress_line(snapshot) == "step 90 1.5 steps/s, 2 min 15 s elapsed; epoch 2; loss nan"


def test_nothing_reported_yet_is_no_line():
    assert progress_line({"time": 1.0, "started_at": 0.0, "step": None, "metrics": {}}) is None
