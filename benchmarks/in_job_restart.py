"""
B10, a lost executor within the try against an Airflow retry: the same training, cluster, checkpoint interval and kill
as B9 (:mod:`benchmarks.lost_executor`), once through an Airflow-style retry (the job run again as soon as the first
try failed: ``retry_delay=0``) and once with ``max_restarts=1`` (the driver of the same try submits the barrier job
again), side by side in each round on a standalone cluster of 2 workers x 2 cores (127.0.0.1).

Reported, per round: seconds from the kill to the first step trained after it on each path and their ratio (in-job /
retry; goal <= 0.25), and the work the in-job restart lost (steps trained again / checkpoint interval; goal <= 1).
The script rounds' retry starts as soon as the first try failed, without Airflow's part (but with a plain
SparkSession's settings); the rounds through a real Airflow deployment (:mod:`benchmarks.airflow_restart`, after the
spot simulation) time the comparison as a DAG author gets it: Airflow's part of the retry and the operator's Spark
settings included.
Then a **spot simulation**: one try with ``max_restarts=3`` whose rank-1 executor is SIGKILLed three times, each in
the last step before a checkpoint is due; it must succeed in that try with at most ``STEPS + 3 x INTERVAL`` steps
trained in all; the page shows the timeline (each kill, the restart's cause, the step it resumed from, the seconds to
its first step).
"""

from __future__ import annotations

import json
import signal
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from benchmarks.airflow_restart import run_through_airflow
from benchmarks.env import bench_environ
from benchmarks.lost_executor import (
    HARNESS,
    INTERVAL,
    KILL_AT,
    SCRIPT,
    TRY_TIMEOUT_S,
    ClusterRounds,
    _outcome,
    _records,
    one_round,
    rank_executor,
    try_arguments,
)
from benchmarks.queueing import Job

RATIO_GOAL = 0.25
"""Issue #36's goal: kill -> first step after the restart, in-job / Airflow retry."""
LOST_GOAL = 1.0
"""Work lost per fault, in checkpoint intervals."""
SPOT_KILLS = (KILL_AT, KILL_AT + 3 * INTERVAL, KILL_AT + 6 * INTERVAL)
"""The spot simulation's kills: after these steps (13, 28, 43 of 60), each in the step before a checkpoint is due."""


def in_job_run(master: str, work: Path, kills: Sequence[int], log: Callable[[str], None], cores_max: int = 2) -> dict:
    """
    One try with ``max_restarts=len(kills)``; rank 1's executor SIGKILLed once attempt ``i`` has recorded step
    ``kills[i]``. Returns the kills' timeline and the try's outcome.

    :param cores_max: the application's ``spark.cores.max`` (executors of one core): 2, one per rank, so a restart
        waits for a replacement executor; 3 keeps a spare one.
    """
    record = work / "steps.jsonl"
    script = work / "try.py"
    script.write_text(SCRIPT)  # B9's training script, with max_restarts
    job = Job(script, try_arguments(master, work, 1, max_restarts=len(kills), cores_max=cores_max), bench_environ())
    try:
        _, app_line = job.wait_for("TRY APP", timeout_s=TRY_TIMEOUT_S)
        app = app_line.split()[-1]
        timeline = []
        for attempt, kill_at in enumerate(kills):
            deadline = time.monotonic() + TRY_TIMEOUT_S
            victim = None  # found once the attempt trains, so the kill follows step kill_at at once
            while True:
                steps = [r["step"] for r in _records(record) if r["attempt"] == attempt]
                if steps and victim is None:
                    try:
                        victim = rank_executor(app, 1)
                    except LookupError:
                        pass
                if victim is not None and max(steps) >= kill_at:
                    break
                if time.monotonic() > deadline or job.proc.poll() is not None:
                    raise RuntimeError(f"attempt {attempt} never trained step {kill_at}: {job.tail()}")
                time.sleep(0.05)  # polls a file the job writes, bounded by the deadline
            killed_at = time.time()
            victim.send_signal(signal.SIGKILL)
            timeline.append({"attempt": attempt, "killed_after_step": kill_at, "killed_at": killed_at})
        _, outcome = _outcome(job, timeout_s=TRY_TIMEOUT_S * 2)
    finally:
        job.finish()
    if not outcome.startswith("TRY RESULT"):
        raise RuntimeError(f"the try with max_restarts={len(kills)} failed: {outcome[:2000]}")
    value = json.loads(outcome.split(" ", 3)[3])
    records = _records(record)
    for i, kill in enumerate(timeline):
        trained = [r["step"] for r in records if r["attempt"] == i]
        after = [r for r in records if r["attempt"] == i + 1]
        restart = value["restarts"][i]
        waited = "task slots available after waiting"  # the driver's line once the replacement executor's slot came
        until = timeline[i + 1]["killed_at"] if i + 1 < len(timeline) else float("inf")  # this restart's own line
        slots = [t for t, _, line in job.lines if kill["killed_at"] < t < until and waited in line]
        kill.update(
            slots_s=slots[0] - kill["killed_at"] if slots else None,
            last_step=max(trained),
            resumed_from=after[0]["step"] - 1,
            lost_steps=max(trained) - (after[0]["step"] - 1),
            to_first_step_s=after[0]["t"] - kill["killed_at"],
            cause=restart["cause"],
        )
        log(f"B10 kill {i + 1}: {json.dumps(kill)}")
    return {"timeline": timeline, "total_steps": len(records), "restarts": len(value["restarts"])}


def run_b10(
    reps: int,
    budget_s: float,
    notes: list[str],
    log: Callable[[str], None],
    airflow_reps: int = 0,
    airflow_budget_s: float = 0.0,
) -> dict:
    """
    Start the cluster, run ``reps`` paired rounds (the retry path, then the in-job one; fewer when the next would
    pass ``budget_s``), then the spot simulation, the spare-executor round and ``airflow_reps`` paired rounds through a
    real Airflow deployment (:mod:`benchmarks.airflow_restart`); return the results.

    :param reps: rounds to run (at least one runs).
    :param budget_s: seconds after which no further round starts (the spot simulation always runs).
    :param airflow_reps: rounds through Airflow (0: none).
    :param airflow_budget_s: seconds from the deployment's start after which no further round through Airflow starts.
    :param notes: where a cut round is noted.
    :param log: progress lines.
    """
    with ClusterRounds("B10", reps, budget_s, notes) as run:
        for cluster, work, i in run:
            (work / "retry").mkdir()
            (work / "in-job").mkdir()
            retry = one_round(cluster.master_url, work / "retry", log)
            (kill,) = in_job_run(cluster.master_url, work / "in-job", [KILL_AT], log)["timeline"]
            run.results.append(
                {
                    "retry_s": retry["to_retry_step_s"],
                    "in_job_s": kill["to_first_step_s"],
                    "in_job_slots_s": kill["slots_s"],
                    "ratio": kill["to_first_step_s"] / retry["to_retry_step_s"],
                    "in_job_lost_intervals": kill["lost_steps"] / INTERVAL,
                    "retry_lost_intervals": retry["lost_intervals"],
                    "cause": kill["cause"],
                }
            )
            log(f"B10 round {i}: {json.dumps(run.results[-1])}")
        (run.work / "spot").mkdir()  # the spot simulation always runs, after the budgeted rounds
        spot = in_job_run(run.cluster.master_url, run.work / "spot", SPOT_KILLS, log)
        (run.work / "spare").mkdir()  # informational: the same restart when the application keeps a spare executor
        try:
            (spare,) = in_job_run(run.cluster.master_url, run.work / "spare", [KILL_AT], log, cores_max=3)["timeline"]
        except Exception as err:  # noqa: BLE001 - informational: the measured rounds stand without it
            spare = {"error": f"{type(err).__name__}: {str(err)[:300]}"}
            log(f"B10 spare-executor round failed: {spare['error']}")
        through: dict = {}
        if airflow_reps:
            (run.work / "airflow").mkdir()
            try:
                through = run_through_airflow(
                    run.cluster, run.work / "airflow", airflow_reps, airflow_budget_s, notes, log
                )
            except Exception as err:  # noqa: BLE001 - the script rounds stand without it; the page says why
                through = {"error": f"{type(err).__name__}: {str(err)[:300]}"}
                log(f"B10 through Airflow failed: {through['error']}")
    rounds = run.results
    return {
        "rounds": rounds,
        "spot": spot,
        "spare": spare,
        **({"airflow": through} if through else {}),
        **HARNESS,
        "ratio_goal": RATIO_GOAL,
        "lost_goal": LOST_GOAL,
        "median_ratio": statistics.median(r["ratio"] for r in rounds),
        "max_in_job_lost_intervals": max(r["in_job_lost_intervals"] for r in rounds),
    }
