"""
B10, a lost executor within the try against an Airflow retry: the same training, cluster, checkpoint interval and kill
as B9 (:mod:`benchmarks.lost_executor`), once through an Airflow-style retry (the job run again as soon as the first
try failed: ``retry_delay=0``) and once with ``max_restarts=1`` (the driver of the same try submits the barrier job
again), side by side in each round on a standalone cluster of 2 workers x 2 cores (127.0.0.1).

Reported, per round: seconds from the kill to the first step trained after it on each path and their ratio (in-job /
retry; goal <= 0.25), and the work the in-job restart lost (steps trained again / checkpoint interval; goal <= 1).
Then a **spot simulation**: one try with ``max_restarts=3`` whose rank-1 executor is SIGKILLed three times, each in
the last step before a checkpoint is due; it must succeed in that try with at most ``STEPS + 3 x INTERVAL`` steps
trained in all; the page shows the timeline (each kill, the restart's cause, the step it resumed from, the seconds to
its first step).
"""

from __future__ import annotations

import json
import shutil
import signal
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from benchmarks.env import bench_environ
from benchmarks.lost_executor import INTERVAL, KILL_AT, STEP_S, STEPS, TRY_TIMEOUT_S, _records, one_round, rank_executor
from benchmarks.queueing import Job

RATIO_GOAL = 0.25
"""Issue #36's goal: kill -> first step after the restart, in-job / Airflow retry."""
LOST_GOAL = 1.0
"""Work lost per fault, in checkpoint intervals."""
SPOT_KILLS = (KILL_AT, KILL_AT + 3 * INTERVAL, KILL_AT + 6 * INTERVAL)
"""The spot simulation's kills: after these steps (13, 28, 43 of 60), each in the step before a checkpoint is due."""

SCRIPT = r"""
import json, os, sys, time
from pyspark.sql import SparkSession

master, ckpt, record, max_restarts, steps, interval, step_s = sys.argv[1:8]
spark = (SparkSession.builder.master(master).appName("b10-in-job")
         .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
         .config("spark.ui.showConsoleProgress", "false").config("spark.cores.max", "2")
         .config("spark.executor.cores", "1").config("spark.executor.memory", "512m")
         .config("spark.executorEnv.PYTHONUNBUFFERED", "1").getOrCreate())
spark.sparkContext.setLogLevel("WARN")
print("B10 APP", spark.sparkContext.applicationId, flush=True)
from airflow_provider_horovod.runtime import HorovodRunner


def train(record, steps, interval, step_s):
    import json, time
    import horovod.torch as hvd
    import torch
    from airflow_provider_horovod.runtime import load_checkpoint, restart_count, save_checkpoint

    hvd.init()
    resumed = load_checkpoint()
    start = resumed[1] if resumed else 0
    weight = resumed[0]["weight"] if resumed else torch.zeros(1)
    for step in range(start + 1, steps + 1):
        weight += hvd.allreduce(torch.ones(1))
        time.sleep(step_s)
        if hvd.rank() == 0:
            with open(record, "a") as f:
                f.write(json.dumps({"try": restart_count(), "step": step, "t": time.time()}) + "\n")
            if step % interval == 0:
                save_checkpoint({"weight": weight}, step=step)
    return {"resumed_from": start, "weight": float(weight)} if hvd.rank() == 0 else None


runner = HorovodRunner(np=2, checkpoint_dir=ckpt, try_number=1, max_restarts=int(max_restarts))
try:
    value = runner.run(train, record=record, steps=int(steps), interval=int(interval), step_s=float(step_s))
except Exception as err:
    print("B10 FAILED", time.time(), json.dumps(str(err)), flush=True)
else:
    print("B10 RESULT", time.time(), json.dumps({**value, "restarts": [r.to_dict() for r in runner.restarts]}),
          flush=True)
spark.stop()
"""


def _outcome(job: Job) -> str:
    """The try's ``B10 RESULT`` or ``B10 FAILED`` line."""
    deadline = time.monotonic() + TRY_TIMEOUT_S * 2
    while time.monotonic() < deadline:
        for _t, stream, line in list(job.lines):
            if stream == "out" and line.startswith(("B10 FAILED", "B10 RESULT")):
                return line
        if job.proc.poll() is not None and not any(r.is_alive() for r in job._readers):
            raise RuntimeError(f"the try ended without an outcome: {job.tail()}")
        time.sleep(0.05)  # polls the lines a reader thread collects, bounded by the deadline
    raise TimeoutError(f"no outcome within {TRY_TIMEOUT_S * 2:.0f} s: {job.tail()}")


def in_job_run(master: str, work: Path, kills: Sequence[int], log: Callable[[str], None]) -> dict:
    """
    One try with ``max_restarts=len(kills)``; rank 1's executor SIGKILLed once attempt ``i`` has recorded step
    ``kills[i]``. Returns the kills' timeline and the try's outcome.
    """
    ckpt, record = work / "checkpoints", work / "steps.jsonl"
    script = work / "b10.py"
    script.write_text(SCRIPT)
    job = Job(
        script,
        [master, str(ckpt), str(record), str(len(kills)), str(STEPS), str(INTERVAL), str(STEP_S)],
        bench_environ(),
    )
    try:
        _, app_line = job.wait_for("B10 APP", timeout_s=TRY_TIMEOUT_S)
        app = app_line.split()[-1]
        timeline = []
        for attempt, kill_at in enumerate(kills):
            deadline = time.monotonic() + TRY_TIMEOUT_S
            victim = None  # found once the attempt trains, so the kill follows step kill_at at once
            while True:
                steps = [r["step"] for r in _records(record) if r["try"] == attempt]
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
        outcome = _outcome(job)
    finally:
        job.finish()
    if not outcome.startswith("B10 RESULT"):
        raise RuntimeError(f"the try with max_restarts={len(kills)} failed: {outcome[:2000]}")
    value = json.loads(outcome.split(" ", 3)[3])
    records = _records(record)
    for i, kill in enumerate(timeline):
        trained = [r["step"] for r in records if r["try"] == i]
        after = [r for r in records if r["try"] == i + 1]
        restart = value["restarts"][i]
        kill.update(
            last_step=max(trained),
            resumed_from=after[0]["step"] - 1,
            lost_steps=max(trained) - (after[0]["step"] - 1),
            to_first_step_s=after[0]["t"] - kill["killed_at"],
            cause=restart["cause"],
        )
        log(f"B10 kill {i + 1}: {json.dumps(kill)}")
    return {"timeline": timeline, "total_steps": len(records), "restarts": len(value["restarts"])}


def run_b10(reps: int, budget_s: float, notes: list[str], log: Callable[[str], None]) -> dict:
    """
    Start the cluster, run ``reps`` paired rounds (the retry path, then the in-job one; fewer when the next would
    pass ``budget_s``), then the spot simulation; return the results.

    :param reps: rounds to run (at least one runs).
    :param budget_s: seconds after which no further round starts (the spot simulation always runs).
    :param notes: where a cut round is noted.
    :param log: progress lines.
    """
    from tests.standalone import standalone_cluster

    rounds: list[dict] = []
    started = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="horovod-b10-"))
    try:
        with standalone_cluster(workers=2, cores_per_worker=2, work_dir=work / "cluster") as cluster:
            first_round = time.monotonic()
            for i in range(reps):
                per_round = (time.monotonic() - first_round) / len(rounds) if rounds else 0.0
                if rounds and time.monotonic() - started + per_round > budget_s:
                    notes.append(f"B10: {i} of {reps} rounds (the next would have passed its {budget_s:.0f} s budget)")
                    break
                retry_dir, in_job_dir = work / f"retry-{i}", work / f"in-job-{i}"
                retry_dir.mkdir()
                in_job_dir.mkdir()
                retry = one_round(cluster.master_url, retry_dir, log)
                (kill,) = in_job_run(cluster.master_url, in_job_dir, [KILL_AT], log)["timeline"]
                rounds.append(
                    {
                        "retry_s": retry["to_retry_step_s"],
                        "in_job_s": kill["to_first_step_s"],
                        "ratio": kill["to_first_step_s"] / retry["to_retry_step_s"],
                        "in_job_lost_intervals": kill["lost_steps"] / INTERVAL,
                        "retry_lost_intervals": retry["lost_intervals"],
                        "cause": kill["cause"],
                    }
                )
                log(f"B10 round {i}: {json.dumps(rounds[-1])}")
            spot_dir = work / "spot"
            spot_dir.mkdir()
            spot = in_job_run(cluster.master_url, spot_dir, SPOT_KILLS, log)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return {
        "rounds": rounds,
        "spot": spot,
        "steps": STEPS,
        "interval": INTERVAL,
        "step_s": STEP_S,
        "kill_at": KILL_AT,
        "ratio_goal": RATIO_GOAL,
        "lost_goal": LOST_GOAL,
        "median_ratio": statistics.median(r["ratio"] for r in rounds),
        "max_in_job_lost_intervals": max(r["in_job_lost_intervals"] for r in rounds),
    }
