"""Progress facts from Spark REST payloads (recorded from a real application, then varied)."""

from __future__ import annotations

import json
from pathlib import Path

from airflow_provider_horovod.clients import ExecutorInfo, JobInfo, StageInfo
from airflow_provider_horovod.utils.stage_progress import ProgressWatcher, Snapshot, describe

DATA = Path(__file__).resolve().parents[1] / "data" / "spark_rest"


def _recorded(name: str) -> list[dict]:
    return json.loads((DATA / f"{name}.json").read_text())


def _job(**changes) -> JobInfo:
    raw = {**_recorded("jobs")[0], **changes}
    return JobInfo.from_json(raw)


def _stage(**changes) -> StageInfo:
    raw = {**_recorded("stages")[0], **changes}
    return StageInfo.from_json(raw)


def _executor(**changes) -> ExecutorInfo:
    raw = {**_recorded("executors")[0], **changes}
    return ExecutorInfo.from_json(raw)


def snapshot(stage_changes: dict, *, group: str = "horovod-abc123", active_on_executor: int = 2) -> Snapshot:
    return Snapshot(
        jobs=[_job(jobId=0, jobGroup=group, stageIds=[3])],
        stages=[_stage(stageId=3, attemptId=0, numTasks=2, **stage_changes)],
        executors=[_executor(id="driver", hostPort="127.0.0.1:40000", activeTasks=active_on_executor)],
    )


def test_waiting_for_slots():
    facts = describe(
        snapshot({"status": "ACTIVE", "numActiveTasks": 0, "submissionTime": "2026-11-30T08:00:00.000GMT"})
    )
    assert facts == {
        "stage-3-0": "barrier stage 3 waiting for 2 free task slots (submitted 2026-11-30T08:00:00.000GMT)"
    }


def test_some_tasks_started_is_a_stage_starting_not_waiting_for_slots():
    """Spark grants a barrier stage all its slots at once; a snapshot may still see only some task starts."""
    facts = describe(snapshot({"status": "ACTIVE", "numActiveTasks": 1}))
    assert facts == {"stage-3-0": "barrier stage 3 starting: 1/2 tasks launched"}


def test_all_ranks_running_names_the_executors():
    facts = describe(snapshot({"status": "ACTIVE", "numActiveTasks": 2}))
    assert facts == {"stage-3-0": "2/2 ranks running on executor driver (127.0.0.1:40000): 2 tasks"}


def test_no_line_while_no_executor_counts_the_running_ranks():
    """The executors' view lags the stage's when the ranks end (the demo printed "running on unknown executors")."""
    assert describe(snapshot({"status": "ACTIVE", "numActiveTasks": 2}, active_on_executor=0)) == {}


def test_ranks_finishing_one_by_one_is_not_waiting_for_slots():
    facts = describe(snapshot({"status": "ACTIVE", "numActiveTasks": 1, "numCompleteTasks": 1}))
    assert facts == {"stage-3-0": "barrier stage 3: 1/2 ranks finished, 1 still running"}


def test_a_failed_task_in_an_active_stage_is_an_abort_not_a_start():
    facts = describe(snapshot({"status": "ACTIVE", "numActiveTasks": 1, "numFailedTasks": 1}))
    assert facts == {"stage-3-0": "barrier stage 3: 1 task(s) failed, 0 killed; Spark is aborting the stage"}


def test_failed_attempt_gives_the_first_line_of_the_reason():
    facts = describe(
        snapshot(
            {
                "status": "FAILED",
                "numActiveTasks": 0,
                "failureReason": "Could not recover from a failed barrier ResultStage.\nat ...",
            }
        )
    )
    assert facts == {
        "stage-3-0": "barrier stage 3 attempt 0 failed: Could not recover from a failed barrier ResultStage."
    }


def test_finished():
    facts = describe(snapshot({"status": "COMPLETE", "numActiveTasks": 0, "numCompleteTasks": 2}))
    assert facts == {"stage-3-0": "barrier stage 3 finished: 2/2 ranks done"}


def test_other_jobs_are_ignored():
    assert describe(snapshot({"status": "ACTIVE", "numActiveTasks": 1}, group="etl")) == {}


class _FakeClient:
    """Serves a sequence of snapshots the way SparkRestClient would (a stand-in for the HTTP layer only)."""

    def __init__(self, snapshots):
        self._snapshots = iter(snapshots)
        self._current = None

    def jobs(self, app_id):
        self._current = next(self._snapshots)
        return self._current.jobs

    def stages(self, app_id):
        return self._current.stages

    def executors(self, app_id):
        return self._current.executors


def test_watcher_logs_changes_only():
    logged: list[str] = []
    waiting = snapshot({"status": "ACTIVE", "numActiveTasks": 0})
    running = snapshot({"status": "ACTIVE", "numActiveTasks": 2})
    watcher = ProgressWatcher("http://127.0.0.1:4040", "local-1", logged.append)
    client = _FakeClient([waiting, waiting, running, running, running])
    for _ in range(5):
        watcher.poll_once(client)  # type: ignore[arg-type]
    assert logged == [
        f"barrier stage 3 waiting for 2 free task slots (submitted {waiting.stages[0].submission_time})",
        "2/2 ranks running on executor driver (127.0.0.1:40000): 2 tasks",
    ]
