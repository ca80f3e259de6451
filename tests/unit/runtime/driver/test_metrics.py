"""What the driver makes of the ranks' records (runtime/driver/metrics.py): history, snapshot, the progress line."""

from __future__ import annotations

import json

import fsspec

from airflow_provider_horovod.runtime.artifacts import list_artifacts
from airflow_provider_horovod.runtime.driver.metrics import MetricsCollector


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _record(rank, step, at, **metrics):
    record = {"time": at, "rank": rank, "step": step, "total_steps": 3000, "epoch": 1}
    if rank == 0:
        record["metrics"] = metrics
    return record


def test_the_snapshot_has_rate_eta_and_the_straggler():
    clock = Clock()
    collector = MetricsCollector(None, clock=clock)
    collector.add(_record(0, 100, 1000.0, loss=0.5))
    collector.add(_record(0, 1100, 1010.0, loss=0.2))  # 100 steps/s
    collector.add(_record(1, 940, 1010.0))  # more than a second of steps behind
    clock.now = 1010.0
    snap = collector.snapshot()
    assert (snap["step"], snap["total_steps"], snap["percent"]) == (1100, 3000, 1100 / 30)
    assert snap["steps_per_s"] == 100.0 and snap["eta_s"] == 19.0
    assert snap["slowest_rank"] == 1 and snap["ranks"]["1"] == {"step": 940, "time": 1010.0}
    assert snap["metrics"] == {"loss": 0.2} and collector.last_metrics == {"loss": 0.2}
    collector.add(_record(1, 1099, 1010.2))  # within about a second of steps: not a straggler
    assert collector.snapshot()["slowest_rank"] is None
    collector.add(_record(0, 1200, 1011.0, epoch_loss=0.3))  # a record with other metrics: each keeps its last
    assert collector.last_metrics == collector.snapshot()["metrics"] == {"loss": 0.2, "epoch_loss": 0.3}


def test_local_files_get_the_history_and_the_final_state_and_are_not_artifacts(tmp_path):
    lines = []
    with MetricsCollector(str(tmp_path), emit=lines.append, flush_interval_s=0.05, log_interval_s=0.05) as c:
        c.add(_record(0, 1, 1.0, loss=1.0))
        c.add(_record(1, 1, 1.0))
        c.add(_record(0, 2, 2.0, loss=0.5))
        c.finish("finished")
    history = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [(r["step"], r["metrics"]) for r in history] == [(1, {"loss": 1.0}), (2, {"loss": 0.5})]  # rank 0's
    snapshot = json.loads((tmp_path / "progress.json").read_text())
    assert snapshot["state"] == "finished" and snapshot["step"] == 2
    assert lines and lines[-1].startswith("step 2/3000 (0%)")
    (tmp_path / "model.pt").write_bytes(b"w")
    assert list_artifacts(str(tmp_path)) == [str(tmp_path / "model.pt")]


def test_appends_across_flushes_and_marks_a_failed_job(tmp_path):
    with MetricsCollector(str(tmp_path), emit=lambda _: None, flush_interval_s=0.01) as c:
        c.add(_record(0, 1, 1.0, loss=1.0))
        c._write()  # noqa: SLF001 - one flush now, as the collector's thread does
        c.add(_record(0, 2, 2.0, loss=0.9))
        c.finish("failed")
    assert len((tmp_path / "metrics.jsonl").read_text().splitlines()) == 2
    assert json.loads((tmp_path / "progress.json").read_text())["state"] == "failed"


def test_object_storage_gets_the_whole_history_and_the_mirror_a_snapshot():
    fs = fsspec.filesystem("memory")
    with MetricsCollector("memory://bucket/art", mirror_dir="memory://bucket/staging", emit=lambda _: None) as c:
        c.add(_record(0, 1, 1.0, loss=1.0))
        c.add(_record(0, 2, 2.0, loss=0.5))
    assert len(fs.cat("/bucket/art/metrics.jsonl").decode().splitlines()) == 2
    assert json.loads(fs.cat("/bucket/staging/progress.json"))["step"] == 2
    assert not fs.exists("/bucket/staging/metrics.jsonl")


def test_a_job_that_reports_nothing_leaves_no_files(tmp_path):
    with MetricsCollector(str(tmp_path), emit=lambda _: None):
        pass
    assert list(tmp_path.iterdir()) == []


def test_a_resume_event_is_kept_in_the_snapshot_and_is_no_report():
    collector = MetricsCollector(None, clock=Clock())
    assert collector.snapshot()["resumed"] is None
    collector.add(
        {
            "event": "resumed",
            "time": 1000.0,
            "rank": 0,
            "step": 10,
            "try_number": 2,
            "saved_by": 1,
            "location": "/ckpt/step-000000000010.json",
        }
    )
    snap = collector.snapshot()
    assert snap["resumed"] == {"step": 10, "try_number": 2, "saved_by": 1, "location": "/ckpt/step-000000000010.json"}
    assert snap["step"] is None and snap["ranks"] == {} and collector.last_metrics == {}


def test_the_phase_before_the_first_report_and_a_failed_job_s_headline_reach_progress_json(tmp_path):
    with MetricsCollector(str(tmp_path), log_interval_s=60) as collector:
        collector.phase("waiting for 2 task slots: 0 free of 2")
        collector.phase("starting 2 ranks (the barrier stage is submitted)")
        collector.finish(
            "failed",
            error="RankFailedError: Horovod rank 1 failed (exit code 1): ValueError: x"
            + "y" * 5000
            + "\nTraceback ...",
        )
    snapshot = json.loads((tmp_path / "progress.json").read_text())
    assert snapshot["phase"] == "starting 2 ranks (the barrier stage is submitted)" and snapshot["step"] is None
    assert snapshot["state"] == "failed" and snapshot["error"].startswith("RankFailedError: Horovod rank 1 failed")
    assert len(snapshot["error"]) <= 1000 and "Traceback" not in snapshot["error"]  # its first line, bounded
    assert not (tmp_path / "metrics.jsonl").exists()  # no history: no file


def test_a_job_that_finished_without_a_report_leaves_no_files(tmp_path):
    with MetricsCollector(str(tmp_path), flush_interval_s=0.05) as collector:
        collector.phase("starting 2 ranks")
        _wait(lambda: (tmp_path / "progress.json").exists())  # the phase is written while the job runs ...
        collector.finish("finished")
    assert list(tmp_path.iterdir()) == []  # ... and removed when it finished without reporting


def _wait(condition, timeout_s: float = 10.0) -> None:
    import time

    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_the_ranks_milestones_make_the_phase_until_the_first_report(tmp_path):
    def event(rank, milestone):
        return {"event": "milestone", "rank": rank, "milestone": milestone, "time": 1.0}

    with MetricsCollector(str(tmp_path), log_interval_s=60, ranks=2, init_call="hvd.init()") as collector:
        collector.phase("starting 2 ranks (the barrier stage is submitted)")
        seen = []
        for rank, milestone in [(0, "loaded"), (1, "loaded"), (0, "init"), (0, "ready"), (1, "init"), (1, "ready")]:
            collector.add(event(rank, milestone))
            seen.append(collector.snapshot()["phase"])
        assert seen == [
            "loading the training function: 1/2 ranks",
            "loading the training function: 2/2 ranks",
            "rendezvous: 1/2 ranks in hvd.init(), 0 joined",
            "rendezvous: 1/2 ranks in hvd.init(), 1 joined",
            "rendezvous: 2/2 ranks in hvd.init(), 1 joined",
            "training: all 2 ranks joined hvd.init(), no report yet",
        ]
        collector.add(_record(0, 1, 1.0, loss=0.5))
        collector.add(event(0, "init"))  # a later init call, after the reports began: the phase stays
        snapshot = collector.snapshot()
        assert snapshot["phase"] == "training: all 2 ranks joined hvd.init(), no report yet" and snapshot["step"] == 1
        assert snapshot["ranks"] == {"0": {"step": 1, "time": 1.0}}  # milestones are not reports
    history = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in history] == [1]  # nor part of the history


def test_without_the_job_s_ranks_milestones_leave_the_phase_alone():
    collector = MetricsCollector(None)
    collector.phase("starting 2 ranks")
    collector.add({"event": "milestone", "rank": 0, "milestone": "init", "time": 1.0})
    assert collector.snapshot()["phase"] == "starting 2 ranks"
