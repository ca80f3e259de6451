"""
B9, work lost per fault: an executor JVM holding one rank is SIGKILLed mid-training and the job is run again with the
same checkpoint directory (what an Airflow retry does), on a standalone cluster of 2 workers x 2 cores (127.0.0.1,
:mod:`tests.standalone`).

Each try is a client script (a SparkSession of its own with ``spark.executor.cores=1``, so each rank has its own
executor) running ``HorovodRunner(np=2, checkpoint_dir=..., try_number=n)`` on an example-shaped training: ``STEPS``
steps of one allreduce and ``STEP_S`` seconds of work, a checkpoint every ``INTERVAL`` steps, rank 0 appending each
step it trains, with its time, to a file. Once rank 0 of the first try has recorded step ``KILL_AT``, the harness
SIGKILLs the executor (``CoarseGrainedExecutorBackend`` of the try's application) that runs rank 1, so the kill
lands in the next step, the last one before a checkpoint is due: the worst place for a fault.

Reported, per round: **work lost** = steps the retry trains again (the first try's last step - the step it resumed
from) / ``INTERVAL`` (goal <= 1.0); seconds from the kill to the failed try's ``HorovodRunner.run`` raising, and to
the retry's first step (the retry is started as soon as the first try has failed, as an Airflow retry with
``retry_delay=0``); the failed try's headline.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil

from benchmarks.env import bench_environ
from benchmarks.queueing import Job

STEPS, INTERVAL, STEP_S, KILL_AT = 60, 5, 0.2, 13
HARNESS = {"steps": STEPS, "interval": INTERVAL, "step_s": STEP_S, "kill_at": KILL_AT}
"""The training and kill every fault benchmark's results carry (B9's, B10's), for its page's method line."""
GOAL = 1.0
"""Issue #26's goal for work lost per fault, in checkpoint intervals."""
TRY_TIMEOUT_S = 240.0

SCRIPT = r"""
import json, os, sys, time
from pyspark.sql import SparkSession

master, ckpt, record, try_no, steps, interval, step_s, max_restarts, cores_max = sys.argv[1:10]
spark = (SparkSession.builder.master(master).appName(f"lost-executor-try-{try_no}")
         .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
         .config("spark.ui.showConsoleProgress", "false").config("spark.cores.max", cores_max)
         .config("spark.executor.cores", "1").config("spark.executor.memory", "512m")
         .config("spark.executorEnv.PYTHONUNBUFFERED", "1").getOrCreate())
spark.sparkContext.setLogLevel("WARN")
print("TRY APP", spark.sparkContext.applicationId, flush=True)
from airflow_provider_horovod.runtime import HorovodRunner


def train(record, steps, interval, step_s):
    import json, time
    import horovod.torch as hvd
    import torch
    from airflow_provider_horovod.runtime import load_checkpoint, restart_count, save_checkpoint, try_number

    hvd.init()
    resumed = load_checkpoint()
    start = resumed[1] if resumed else 0
    weight = resumed[0]["weight"] if resumed else torch.zeros(1)
    for step in range(start + 1, steps + 1):
        weight += hvd.allreduce(torch.ones(1))
        time.sleep(step_s)
        if hvd.rank() == 0:
            with open(record, "a") as f:
                record_ = {"try": try_number(), "attempt": restart_count(), "step": step, "t": time.time()}
                f.write(json.dumps(record_) + "\n")
            if step % interval == 0:
                save_checkpoint({"weight": weight}, step=step)
    return {"try": try_number(), "resumed_from": start, "weight": float(weight)} if hvd.rank() == 0 else None


runner = HorovodRunner(np=2, checkpoint_dir=ckpt, try_number=int(try_no), max_restarts=int(max_restarts))
try:
    value = runner.run(train, record=record, steps=int(steps), interval=int(interval), step_s=float(step_s))
except Exception as err:
    print("TRY FAILED", time.time(), json.dumps(str(err)), flush=True)
else:
    print("TRY RESULT", time.time(), json.dumps({**value, "restarts": [r.to_dict() for r in runner.restarts]}),
          flush=True)
spark.stop()
"""


def executor_of(app: str, executor_id: str | None = None) -> list[psutil.Process]:
    """The ``CoarseGrainedExecutorBackend`` JVMs of application ``app`` (one id's, when given)."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmd = proc.info.get("cmdline") or []
        if (
            "org.apache.spark.executor.CoarseGrainedExecutorBackend" in cmd
            and app in cmd
            and (executor_id is None or cmd[cmd.index("--executor-id") + 1] == executor_id)
        ):
            found.append(proc)
    return found


def rank_executor(app: str, rank: int) -> psutil.Process:
    """The executor JVM whose task runs Horovod rank ``rank`` (``tests.standalone.holds_rank``: in its process tree,
    or forked for its task by the job's fork server)."""
    from tests.standalone import holds_rank

    for jvm in executor_of(app):
        if holds_rank(jvm, rank):
            return jvm
    raise LookupError(f"no executor of {app} runs rank {rank}")


def _records(path: Path) -> list[dict]:
    """The steps rank 0 recorded (complete lines only: the file may be read while a line is written)."""
    return [json.loads(line) for line in path.read_text().split("\n")[:-1]] if path.exists() else []


def one_round(master: str, work: Path, log) -> dict:
    """One kill and retry; the measurements of :mod:`benchmarks.lost_executor`'s docstring."""
    record = work / "steps.jsonl"
    script = work / "try.py"
    script.write_text(SCRIPT)
    env = bench_environ()

    def start(try_no: int) -> Job:
        return Job(script, try_arguments(master, work, try_no, max_restarts=0), env)

    first = start(1)
    _, app_line = first.wait_for("TRY APP", timeout_s=TRY_TIMEOUT_S)
    app = app_line.split()[-1]
    deadline = time.monotonic() + TRY_TIMEOUT_S
    victim = None
    while victim is None:  # found while the ranks start, so the kill follows step KILL_AT at once
        try:
            victim = rank_executor(app, 1)
        except LookupError:
            if time.monotonic() > deadline or first.proc.poll() is not None:
                raise RuntimeError(f"rank 1 never started: {first.tail()}") from None
            time.sleep(0.2)  # polls the process table, bounded by the deadline
    while not any(r["step"] >= KILL_AT for r in _records(record)):
        if time.monotonic() > deadline or first.proc.poll() is not None:
            raise RuntimeError(f"the first try never trained step {KILL_AT}: {first.tail()}")
        time.sleep(0.05)  # polls a file the job writes, bounded by the deadline
    killed_at = time.time()
    victim.send_signal(signal.SIGKILL)
    failed_at, failed = _outcome(first)
    first.finish()
    if not failed.startswith("TRY FAILED"):
        raise RuntimeError(f"the first try did not fail after its executor was killed: {failed}")
    headline = json.loads(failed.split(" ", 3)[3]).splitlines()[0]
    log(f"B9: first try failed {failed_at - killed_at:.1f} s after the kill: {headline}")
    trained_first = [r["step"] for r in _records(record) if r["try"] == 1]
    retry = start(2)
    _, done = _outcome(retry)
    retry.finish()
    if not done.startswith("TRY RESULT"):
        raise RuntimeError(f"the retry failed: {done}")
    value = json.loads(done.split(" ", 3)[3])
    second = [r for r in _records(record) if r["try"] == 2]
    lost = max(trained_first) - value["resumed_from"]
    return {
        "lost_steps": lost,
        "lost_intervals": lost / INTERVAL,
        "to_failure_s": failed_at - killed_at,
        "to_retry_step_s": second[0]["t"] - killed_at,
        "retry_start_s": second[0]["t"] - failed_at,
        "resumed_from": value["resumed_from"],
        "last_step_first_try": max(trained_first),
        "total_steps": len(trained_first) + len(second),
        "headline": headline,
    }


def try_arguments(master: str, work: Path, try_no: int, max_restarts: int, cores_max: int = 2) -> list[str]:
    """
    :data:`SCRIPT`'s command line: a try of the training, its checkpoints and step record in ``work``; the
    application may hold ``cores_max`` executors of one core (2: one per rank, no spare).
    """
    ckpt, record = work / "checkpoints", work / "steps.jsonl"
    return [
        *(master, str(ckpt), str(record), str(try_no), str(STEPS), str(INTERVAL), str(STEP_S), str(max_restarts)),
        str(cores_max),
    ]


def _outcome(job: Job, timeout_s: float = TRY_TIMEOUT_S) -> tuple[float, str]:
    """The arrival time and text of the try's ``TRY FAILED`` or ``TRY RESULT`` line."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for t, stream, line in list(job.lines):
            if stream == "out" and line.startswith(("TRY FAILED", "TRY RESULT")):
                return t, line
        if job.proc.poll() is not None and not any(r.is_alive() for r in job._readers):
            raise RuntimeError(f"the try ended without an outcome: {job.tail()}")
        time.sleep(0.05)  # polls the lines a reader thread collects, bounded by the deadline
    raise TimeoutError(f"no outcome within {timeout_s:.0f} s: {job.tail()}")


class ClusterRounds:
    """
    Rounds of a fault benchmark on one standalone cluster of 2 workers x 2 cores (127.0.0.1), within a time budget:
    ``with ClusterRounds("B9", reps, budget_s, notes) as run: for cluster, work, i in run: ...`` gives each
    round the cluster, a fresh folder and its index, and stops starting rounds once the next would end past
    ``budget_s`` (at least one runs; the cut is noted); each round appends its measurements to ``run.results``.
    Everything (cluster, folders) is removed on exit; :attr:`cluster` and :attr:`work` stay usable inside it.

    :param name: the benchmark, for the note (``"B9"``).
    :param reps: rounds to run.
    :param budget_s: seconds, from the start (the cluster's start included), after which no further round starts.
    :param notes: where a cut is noted.
    """

    def __init__(self, name: str, reps: int, budget_s: float, notes: list[str]) -> None:
        self.name, self.reps, self.budget_s, self.notes = name, reps, budget_s, notes
        self.results: list[dict] = []
        self._stack = contextlib.ExitStack()

    def __enter__(self) -> ClusterRounds:
        from tests.standalone import standalone_cluster

        self.started = time.monotonic()
        self.work = Path(tempfile.mkdtemp(prefix=f"horovod-{self.name.lower()}-"))
        self._stack.callback(shutil.rmtree, self.work, ignore_errors=True)
        self.cluster = self._stack.enter_context(
            standalone_cluster(workers=2, cores_per_worker=2, work_dir=self.work / "cluster")
        )
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def __iter__(self) -> Iterator[tuple[Any, Path, int]]:
        first_round = time.monotonic()  # the budget's rounds: the cluster's start is not one
        for i in range(self.reps):
            per_round = (time.monotonic() - first_round) / len(self.results) if self.results else 0.0
            if self.results and time.monotonic() - self.started + per_round > self.budget_s:
                self.notes.append(
                    f"{self.name}: {i} of {self.reps} rounds (the next would have passed its {self.budget_s:.0f} s "
                    "budget)"
                )
                return
            round_dir = self.work / f"round-{i}"
            round_dir.mkdir()
            yield self.cluster, round_dir, i


def run_b9(reps: int, budget_s: float, notes: list[str], log) -> dict:
    """
    Start the cluster, run ``reps`` rounds (fewer when the next would pass ``budget_s``), return the results.

    :param reps: rounds to run (at least one runs).
    :param budget_s: seconds after which no further round starts.
    :param notes: where a cut round is noted.
    :param log: progress lines.
    """
    with ClusterRounds("B9", reps, budget_s, notes) as run:
        for cluster, work, i in run:
            run.results.append(one_round(cluster.master_url, work, log))
            log(f"B9 round {i}: {json.dumps(run.results[-1])}")
    rounds = run.results
    return {
        "rounds": rounds,
        **HARNESS,
        "goal": GOAL,
        "median_lost_intervals": statistics.median(r["lost_intervals"] for r in rounds),
        "max_lost_intervals": max(r["lost_intervals"] for r in rounds),
    }
