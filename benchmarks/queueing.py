"""
B5, queueing cost on a busy cluster: the time from one job freeing its task slots to the next waiting job's ranks
starting.

A Spark standalone cluster of 2 workers x 2 cores (127.0.0.1, :mod:`tests.standalone`) and a chain of np=4 jobs,
each a client script running ``HorovodRunner`` in a SparkSession of its own (as spark-submit runs the driver
program). Every job's ranks wait for a gate file once they run, so each job holds all 4 slots until the harness
releases it:

1. job *k* holds the slots; job *k+1* starts and waits for slots (the harness sees it say so);
2. the harness opens job *k*'s gate: its ranks return, ``HorovodRunner.run`` returns (**freed**: job *k* is done
   with its slots; its driver then stops the SparkContext, which hands the cores back to the master), and job
   *k+1*'s ranks start (and hold the slots for job *k+2*).

Queueing cost = job *k+1*'s rank 0 process creation (its start tick in ``/proc``, read inside the function) - job *k*'s
return. All on this machine, so the wall clocks agree. The breakdown adds job *k*'s ``SparkContext.stop()``, the moment
job *k+1* saw its slots (the runtime's line, timestamped by the harness as it arrives) and its function entry (the
rank's interpreter started and the function unpickled; the probe imports neither torch nor Horovod).

Two contenders for the waiting job, in turns: **ours** (the runtime's driver-side wait,
:mod:`airflow_provider_horovod.runtime.driver.slots`) and **Spark's barrier check retry**: the same job with that wait
switched off (the script replaces it) and Spark's own check retrying every second
(``spark.scheduler.barrier.maxConcurrentTasksCheck.interval=1s``, a huge ``maxFailures``), the alternative
design; the WARN lines Spark logs while it retries are counted.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from benchmarks.contenders import Series
from benchmarks.env import PYTHON, REPO, bench_environ

CONTENDERS = {
    "ours": "driver-side wait (the provider)",
    "spark-retry": "Spark's barrier check retry, interval 1 s (alternative)",
}
GOAL_S = 5.0
"""Issue #11's goal for the queueing cost (ours), seconds."""
ROUND_TIMEOUT_S = 300.0
"""The most seconds one step of a round may take before the round is abandoned."""

SCRIPT = r"""
import json, os, sys, time
from pyspark.sql import SparkSession

master, ui_port, gate, variant, jvm_options, hook_conf = sys.argv[1:7]
builder = (SparkSession.builder.master(master).appName(f"b5-{variant}")
           .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
           .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
           .config("spark.cores.max", "4").config("spark.executor.memory", "512m")
           .config("spark.master.ui.port", ui_port)
           .config("spark.executorEnv.PYTHONUNBUFFERED", "1")
           # the JVM options the provider's hooks give the applications they submit (utils/spark_conf.py)
           .config("spark.driver.extraJavaOptions", jvm_options)
           .config("spark.executor.extraJavaOptions", jvm_options))
for key, value in json.loads(hook_conf).items():  # the hooks' Python daemon (utils/spark_conf.py)
    builder = builder.config(key, value)
if variant == "spark-retry":
    import airflow_provider_horovod.runtime.driver.runner as runner_module

    runner_module.wait_for_slots = lambda *args, **kwargs: 0.0  # the alternative: Spark's check does the waiting
    builder = (builder.config("spark.scheduler.barrier.maxConcurrentTasksCheck.interval", "1s")
               .config("spark.scheduler.barrier.maxConcurrentTasksCheck.maxFailures", "100000"))
else:  # the provider's defaults (hooks/horovod.py BASE_SPARK_CONF)
    builder = (builder.config("spark.scheduler.barrier.maxConcurrentTasksCheck.interval", "5s")
               .config("spark.scheduler.barrier.maxConcurrentTasksCheck.maxFailures", "6"))
spark = builder.getOrCreate()
spark.sparkContext.setLogLevel("WARN")
print("B5 APP", spark.sparkContext.applicationId, flush=True)
from airflow_provider_horovod.runtime import HorovodRunner


def probe_and_hold(gate):
    import os, time
    entry = time.time()
    # not psutil's create_time(): its boot time is whole seconds, so it reads up to 1 s early (benchmarks/jobs.py)
    with open("/proc/self/stat") as f:
        start_tick = int(f.read().rsplit(")", 1)[1].split()[19])
    created = entry - (time.clock_gettime(time.CLOCK_BOOTTIME) - start_tick / os.sysconf("SC_CLK_TCK"))
    print("B5 HELD", flush=True)
    while not os.path.exists(gate):
        time.sleep(0.02)  # the harness opens the gate
    return {"created": created, "entry": entry}


value = HorovodRunner(np=4).run(probe_and_hold, gate=gate)
print("B5 RETURNED", time.time(), flush=True)
print("B5 RESULT " + json.dumps(value), flush=True)
spark.stop()
print("B5 STOPPED", time.time(), flush=True)
"""


CLUSTER_LOG4J2 = """\
# B5's cluster (master, workers, executors): Spark's INFO lines with millisecond timestamps, which the harness reads
rootLogger.level = info
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yyyy-MM-dd HH:mm:ss.SSS} %p %c{1}: %m%n
"""
LOG_TIME_FORMAT = "%Y-%m-%d %H:%M:%S.%f"

CLUSTER_MARKS = {
    "launched": ("master", "Launching executor {app}/"),
    "registered": ("executor", "Successfully registered with driver"),
    "assigned": ("executor", "Got assigned task"),
    "python": ("executor", "Starting Python task execution"),
}
"""What the harness reads from the cluster's logs for each waiting job: (whose log, line containing)."""


def cluster_marks(work_dir: Path, app: str) -> dict[str, float | None]:
    """
    When the cluster's logs say each :data:`CLUSTER_MARKS` step happened for application ``app``: the master's
    first such line, and each executor's first, the last executor's for the job (a barrier stage needs all).

    :param work_dir: the standalone cluster's work directory (``logs/master.log``, ``worker-*/<app>/*/stderr``).
    :param app: the application id.
    :return: epoch seconds per step; ``None`` where no line says it.
    """
    import datetime

    def first(lines: list[str], text: str) -> float | None:
        for line in lines:
            if text in line:
                try:
                    return datetime.datetime.strptime(line[:23], LOG_TIME_FORMAT).timestamp()
                except ValueError:
                    continue
        return None

    master = (work_dir / "logs" / "master.log").read_text(errors="replace").splitlines()
    executors = [p.read_text(errors="replace").splitlines() for p in work_dir.glob(f"worker-*/{app}/*/stderr")]
    marks: dict[str, float | None] = {}
    for step, (where, text) in CLUSTER_MARKS.items():
        if where == "master":
            marks[step] = first(master, text.format(app=app))
        else:
            times = [first(lines, text) for lines in executors]
            marks[step] = max(times) if times and None not in times else None
    return marks


class Job:
    """A client script whose stdout and stderr lines are kept with the time they arrived."""

    def __init__(self, script: Path, args: list[str], env: dict[str, str]) -> None:
        self.lines: list[tuple[float, str, str]] = []  # (arrival time, stream, line)
        self._changed = threading.Condition()
        self.proc = subprocess.Popen(
            [PYTHON, str(script), *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1
        )
        self._readers = [
            threading.Thread(target=self._read, args=(s, n), daemon=True)
            for s, n in ((self.proc.stdout, "out"), (self.proc.stderr, "err"))
        ]
        for reader in self._readers:
            reader.start()

    def _read(self, stream, name: str) -> None:
        for line in stream:
            with self._changed:
                self.lines.append((time.time(), name, line.rstrip("\n")))
                self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    def wait_for(self, text: str, stream: str = "out", timeout_s: float = ROUND_TIMEOUT_S) -> tuple[float, str]:
        """The first line of ``stream`` containing ``text`` and its arrival time; waits for it (bounded)."""
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while True:
                found = next(((t, ln) for t, s, ln in self.lines if s == stream and text in ln), None)
                if found is not None:
                    return found
                if self.proc.poll() is not None and all(not r.is_alive() for r in self._readers):
                    raise RuntimeError(f"the script ended before printing {text!r}: " + self.tail())
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"no {text!r} within {timeout_s:.0f} s: " + self.tail())
                self._changed.wait(min(left, 1.0))

    def finish(self, timeout_s: float = ROUND_TIMEOUT_S) -> None:
        """Wait for the script to exit; kill it past ``timeout_s``."""
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=30)
        for reader in self._readers:
            reader.join(timeout=10)

    def count(self, text: str, stream: str = "err") -> int:
        return sum(1 for _, s, ln in self.lines if s == stream and text in ln)

    def tail(self, n: int = 15) -> str:
        return " | ".join(ln for _, _, ln in self.lines[-n:])


def _start(cluster, script: Path, work: Path, variant: str, index: int) -> tuple[Job, Path]:
    env = {**cluster.env, **bench_environ()}
    ui_port = cluster.web_ui_url.rsplit(":", 1)[1]
    gate = work / f"gate-{index}"
    from airflow_provider_horovod.runtime.driver.shipping import RUNTIME_ZIP_NAME
    from airflow_provider_horovod.utils.spark_conf import JVM_STARTUP_OPTIONS, python_daemon_conf

    # HorovodRunner ships the runtime zip (addPyFile): the executors fetch it into their working directory
    hook_conf = json.dumps(python_daemon_conf({}, RUNTIME_ZIP_NAME))
    return Job(script, [cluster.master_url, ui_port, str(gate), variant, JVM_STARTUP_OPTIONS, hook_conf], env), gate


def _waiting(job: Job, variant: str) -> float:
    """When ``job`` said it waits for slots (ours: the runtime's line; the alternative: Spark's WARN)."""
    if variant == "ours":
        return job.wait_for("waiting for 4 task slots")[0]
    return job.wait_for("requires 4 slots", stream="err")[0]


def run_b5(reps: int, budget_s: float, notes: list[str], log) -> dict:
    """
    B5: a chain of jobs, each measured as the waiting one; contenders in turns, ``reps`` each, within ``budget_s``
    seconds (at least one each).

    :return: ``{"rounds": {contender: [round, ...]}, "series": {contender: Series of queueing costs},
        "goal_s": ..., "contenders": {contender: label}}``.
    """
    from tests.standalone import standalone_cluster

    rounds: dict[str, list[dict]] = {name: [] for name in CONTENDERS}
    series = {name: Series() for name in CONTENDERS}
    work = Path(tempfile.mkdtemp(prefix="horovod-b5-"))
    script = work / "b5_job.py"
    script.write_text(SCRIPT)
    order = [name for _ in range(reps) for name in CONTENDERS]
    jobs: list[tuple[Job, Path, str]] = []
    start, last = time.monotonic(), 0.0
    with contextlib.ExitStack() as cleanup:
        cleanup.callback(shutil.rmtree, work, ignore_errors=True)
        (work / "standalone" / "conf").mkdir(parents=True)
        (work / "standalone" / "conf" / "log4j2.properties").write_text(CLUSTER_LOG4J2)
        cluster = cleanup.enter_context(standalone_cluster(workers=2, cores_per_worker=2, work_dir=work / "standalone"))
        try:
            holder, gate = _start(cluster, script, work, "ours", 0)  # the first holder is not measured
            jobs.append((holder, gate, "ours"))
            holder.wait_for("B5 HELD")
            for index, variant in enumerate(order, start=1):
                if index > len(CONTENDERS) and time.monotonic() - start + last > budget_s:
                    notes.append(
                        f"B5: {index - 1} of {len(order)} rounds (the next would have passed its "
                        f"{budget_s:.0f} s budget)"
                    )
                    break
                round_start = time.monotonic()
                previous, previous_gate, _ = jobs[-1]
                job, gate = _start(cluster, script, work, variant, index)
                jobs.append((job, gate, variant))
                try:
                    waiting_at = _waiting(job, variant)
                    previous_gate.touch()
                    freed = float(previous.wait_for("B5 RETURNED")[1].split()[-1])
                    stopped = float(previous.wait_for("B5 STOPPED")[1].split()[-1])
                    job.wait_for("B5 HELD")
                except Exception as err:  # recorded as the contender's reason; the chain ends here
                    series[variant].reason = f"failed: {type(err).__name__}: {str(err)[:300]}"
                    log(f"B5 {variant}: {series[variant].reason}")
                    break
                seen = next(
                    (
                        t
                        for t, stream, ln in job.lines
                        if stream == "out" and "task slots available after waiting" in ln
                    ),
                    None,
                )
                rounds[variant].append(
                    {"freed": freed, "stopped": stopped, "slots_seen": seen, "waiting_at": waiting_at, "job": index}
                )
                last = time.monotonic() - round_start
            jobs[-1][1].touch()  # release the last holder
            for job, _, _ in jobs:
                job.finish()
            for measured in rounds.values():
                for r in measured:
                    app = jobs[r["job"]][0].wait_for("B5 APP", timeout_s=1)[1].split()[-1]
                    r.update(cluster_marks(work / "standalone", app))
        finally:
            for job, _, _ in jobs:
                if job.proc.poll() is None:
                    job.proc.kill()
                    job.finish(timeout_s=30)
    results = {}
    for index, (job, _, _) in enumerate(jobs):
        line = next((ln for _, s, ln in job.lines if s == "out" and ln.startswith("B5 RESULT ")), None)
        if line is not None:
            results[index] = json.loads(line.split("B5 RESULT ", 1)[1])
    for name, measured in rounds.items():
        for r in measured:
            value = results.get(r["job"])
            job = jobs[r["job"]][0]
            r["warn_lines"] = job.count("requires 4 slots")
            if value is None:
                continue
            r.update(value)  # created, entry (and whatever else the probe returns)
            series[name].samples.append(r["created"] - r["freed"])
            log(
                f"B5 {name}: freed -> ranks created {r['created'] - r['freed']:.2f} s (SparkContext stop "
                f"{r['stopped'] - r['freed']:.2f} s, {r['warn_lines']} WARN lines)"
            )
        rounds[name] = [r for r in measured if "created" in r]
    return {"rounds": rounds, "series": series, "goal_s": GOAL_S, "contenders": dict(CONTENDERS)}


PHASES = {
    "launched": "holding application ended: the master launches the waiting job's executors",
    "registered": "executor JVMs started and registered with the waiting driver",
    "slots_seen": "waiting driver sees its 4 slots",
    "assigned": "barrier tasks assigned to the executors",
    "python": "tasks start Python (each executor's PySpark daemon)",
    "created": "rank processes created = queueing cost",
    "entry": "function entered (rank interpreter started, function unpickled)",
    "stopped": "holding job's SparkContext.stop() returned (not on the path)",
}
"""The steps of a hand-over, in order (keys of a round), and their labels on the page."""


def phases(rounds: list[dict]) -> dict[str, float | None]:
    """
    Median seconds of each step of the hand-over (:data:`PHASES`), from the holding job's `HorovodRunner.run`
    returning; ``None`` for a step no round saw (the alternative has no "sees its slots" line).
    """
    out: dict[str, float | None] = {}
    for key in PHASES:
        values = [r[key] - r["freed"] for r in rounds if r.get(key) is not None]
        out[key] = statistics.median(values) if values else None
    return out


def main() -> int:
    """``python -m benchmarks.queueing``: run B5 alone and print its rounds (no page is written)."""
    os.environ.update(bench_environ())
    sys.path.insert(0, str(REPO))
    result = run_b5(int(os.environ.get("B5_REPS", "1")), 600.0, [], lambda m: print(m, file=sys.stderr))
    for name, rs in result["rounds"].items():
        for key, value in phases(rs).items():
            print(f"{name:12} {'-' if value is None else f'{value:+.2f} s'}  {PHASES[key]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
