"""
B11 (issue #38, "Scale"): the launch and run cost of a trivial ``torch.distributed`` job against the number of ranks.

At np = 2, 4, 8, 16 on one ``local[16]`` SparkSession (127.0.0.1), seconds from the call to rank 0's value of a trivial
job (gloo, one ``all_reduce`` of ones: rank 0 returns np) for three launchers side by side: this provider's
``TorchDistributor(num_processes=np, local_mode=False, use_gpu=False)``, PySpark's
``pyspark.ml.torch.distributor.TorchDistributor`` (same arguments) and bare ``torchrun --standalone
--nproc_per_node=np`` running the same job as a script (a subprocess; the ranks get the ``OMP_NUM_THREADS`` ours
gives them). One untimed warm-up of each at the smallest np, then interleaved rounds (np ascending; the contenders'
order rotating); medians of the rounds.

The example model (issue #38: "the trivial allreduce job AND the example model"), informational: at each np of each
round, after the trivial job's three launchers, ours and bare ``torchrun --standalone --nproc_per_node=np -m
benchmarks.bare_throughput`` (not PySpark's: B8 compares it, and it takes over a minute at np=16) run B8's DDP
training of the example model, :func:`benchmarks.jobs.ddp_train_throughput`, for :data:`MODEL_WARMUP_STEPS` +
:data:`MODEL_STEPS` steps per rank: seconds from the call to rank 0's result, and the samples/s it reports.

For the two Spark launchers the driver side's cost of each call is sampled too: this Python process (where an
Airflow task would run the call) and the Spark driver JVM (in ``local[16]`` it hosts the executor's task threads as
well): CPU seconds over the call, and peak RSS sampled every :data:`SAMPLE_S` by a small thread.
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Self

from benchmarks import jobs
from benchmarks.contenders import (
    Series,
    Unavailable,
    _torch_distributor,
    first_line,
    run_bare,
    run_ours_torch,
    run_torch_distributor,
    timed,
)
from benchmarks.env import PYTHON, bench_environ, spark_session
from benchmarks.sampling import Sampler

SIZES = (2, 4, 8, 16)
"""The numbers of ranks measured."""
CORES = 16
"""The ``local[N]`` of B11's SparkSession: a slot for each of the largest job's barrier tasks."""
OURS, TORCHRUN, PYSPARK = "ours", "bare torchrun", "TorchDistributor"
CONTENDERS = (OURS, TORCHRUN, PYSPARK)
"""The launchers, in the order of the first round (each round starts one later)."""
TORCHRUN_GOAL = 1.1
"""Issue #38's goal: launch time, ours / bare torchrun, at every np."""
PYSPARK_GOAL = 0.3
"""Issue #38's goal: launch time, ours / PySpark's ``TorchDistributor``, at every np."""
SAMPLE_S = 0.15
"""The driver-side sampler's interval (seconds)."""
CALL_TIMEOUT_S = 300
"""A call still running after this is cancelled (Spark: every job of the context; torchrun: killed) and fails."""
MODEL_CONTENDERS = (OURS, TORCHRUN)
"""The launchers of the example model's leg, in the order of the first round (each round starts one later)."""
MODEL_BATCH_SIZE = 32
"""Each rank's batch in the example model's leg: the example DAG's default, B8's."""
MODEL_WARMUP_STEPS = 5
"""The example model's untimed steps per rank (the first steps build DDP's buckets)."""
MODEL_STEPS = 20
"""The example model's timed steps per rank: at np=16 on 2 cores one call of each launcher stays under ~30 s."""

TRIVIAL_SCRIPT = """\
import json
import sys

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
t = torch.ones(1)
dist.all_reduce(t)
rank = dist.get_rank()
dist.destroy_process_group()
if rank == 0:
    with open(sys.argv[1], "w") as f:
        json.dump(float(t.item()), f)
"""
"""Bare torchrun's job: :func:`benchmarks.jobs.torch_dist_trivial` as a script; rank 0 writes its value to
``argv[1]``."""


class DriverSampler(Sampler):
    """
    The driver side's cost of one call: CPU seconds (user + system, all threads) of this process and of the Spark
    driver JVM over the call, and their peak RSS sampled every :data:`SAMPLE_S` s by a thread.

    :param jvm: the Spark driver JVM's ``psutil.Process``, or ``None`` (its columns stay ``None``).
    """

    def __init__(self, jvm) -> None:
        import psutil

        super().__init__(SAMPLE_S, name="b11-driver-sampler")
        self._me = psutil.Process(os.getpid())
        self._jvm = jvm
        self.peak_rss = {"python": 0, "jvm": 0}
        self.samples = 0

    @staticmethod
    def _cpu_s(proc) -> float | None:
        if proc is None:
            return None
        try:
            t = proc.cpu_times()
        except Exception:  # the JVM gone: no number rather than a wrong one
            return None
        return t.user + t.system

    def _sample(self) -> None:
        for role, proc in (("python", self._me), ("jvm", self._jvm)):
            if proc is None:
                continue
            try:
                self.peak_rss[role] = max(self.peak_rss[role], proc.memory_info().rss)
            except Exception:
                pass
        self.samples += 1

    def __enter__(self) -> Self:
        self._cpu0 = (self._cpu_s(self._me), self._cpu_s(self._jvm))
        return super().__enter__()

    def __exit__(self, *exc: object) -> None:
        super().__exit__(*exc)
        self._cpu1 = (self._cpu_s(self._me), self._cpu_s(self._jvm))

    def record(self) -> dict:
        """This call's numbers: ``python_cpu_s``, ``jvm_cpu_s`` (``None`` without a JVM), peak RSS bytes of each,
        and how many samples were taken."""

        def delta(i: int) -> float | None:
            a, b = self._cpu0[i], self._cpu1[i]
            return None if a is None or b is None else b - a

        return {
            "python_cpu_s": delta(0),
            "jvm_cpu_s": delta(1),
            "python_peak_rss_bytes": self.peak_rss["python"],
            "jvm_peak_rss_bytes": self.peak_rss["jvm"] if self._jvm is not None else None,
            "samples": self.samples,
        }


def driver_jvm():
    """The Spark driver JVM: the ``java`` process below this one (in-process PySpark starts it), or ``None``."""
    import psutil

    for child in psutil.Process(os.getpid()).children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if child.name() == "java":
                return child
    return None


@contextlib.contextmanager
def _cancel_after(sc, seconds: float):
    """Cancel every job of ``sc`` if the block is still running after ``seconds``: a hung launch fails, not the run."""
    timer = threading.Timer(seconds, sc.cancelAllJobs)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


def run_bare_torchrun(np: int, threads: str) -> tuple[float, float]:
    """
    ``torchrun --standalone --nproc_per_node=np`` of :data:`TRIVIAL_SCRIPT`: seconds from the start to the launcher's
    exit, and rank 0's value.

    :param np: ranks.
    :param threads: the ranks' ``OMP_NUM_THREADS``.
    :raises Unavailable: the venv has no ``torchrun``.
    :raises RuntimeError: torchrun failed or rank 0 wrote no value (the output's tail in the message).
    """
    torchrun = os.path.join(os.path.dirname(PYTHON), "torchrun")
    if not os.path.exists(torchrun):
        raise Unavailable(f"{torchrun} not found")
    with tempfile.TemporaryDirectory(prefix="b11-torchrun-") as tmp:
        script, out = os.path.join(tmp, "trivial.py"), os.path.join(tmp, "value.json")
        with open(script, "w") as f:
            f.write(TRIVIAL_SCRIPT)
        env = {**os.environ, **bench_environ(), "OMP_NUM_THREADS": threads}
        cmd = [torchrun, "--standalone", f"--nproc_per_node={np}", script, out]
        start = time.perf_counter()
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=CALL_TIMEOUT_S, cwd=tmp)
        seconds = time.perf_counter() - start
        if proc.returncode != 0 or not os.path.exists(out):
            raise RuntimeError(f"torchrun exited {proc.returncode}: {(proc.stdout + proc.stderr).strip()[-600:]}")
        with open(out) as f:
            return seconds, json.load(f)


SETTLE_BELOW_PERCENT = 25.0
SETTLE_MAX_S = 20.0


def settle(max_s: float = SETTLE_MAX_S) -> float:
    """
    Wait until the machine is quiet (CPU use over half a second below :data:`SETTLE_BELOW_PERCENT` of all cores) or
    ``max_s`` seconds have passed; return the seconds waited. The launchers leave a wake (PySpark's
    ``TorchDistributor`` at np=16: sixteen torchrun agents and their ranks exiting for seconds after the call
    returned): measured in one round, ours at np=16 took 17.6 s when it ran first and 24.8 s right after it.
    """
    import psutil

    start = time.monotonic()
    while time.monotonic() - start < max_s and psutil.cpu_percent(interval=0.5) >= SETTLE_BELOW_PERCENT:
        pass
    return time.monotonic() - start


def check_model_result(value: Any, np: int) -> float:
    """
    Rank 0's result of :func:`benchmarks.jobs.ddp_train_throughput` if sane: a dict with ``samples_per_s`` above 0,
    and where it reports them, a world size of ``np`` and rank 0.

    :param value: what the launcher returned.
    :param np: the ranks asked for.
    :return: its ``samples_per_s``.
    :raises RuntimeError: anything else.
    """
    if not isinstance(value, dict) or not isinstance(value.get("samples_per_s"), int | float):
        raise RuntimeError(f"rank 0 returned {value!r}, expected a dict with samples_per_s")
    if not value["samples_per_s"] > 0:
        raise RuntimeError(f"rank 0 reported samples_per_s={value['samples_per_s']!r}")
    if value.get("size", np) != np:
        raise RuntimeError(f"rank 0 reported world size {value['size']!r}, expected {np}")
    if value.get("rank", 0) != 0:
        raise RuntimeError(f"the result came from rank {value['rank']!r}, not rank 0")
    return float(value["samples_per_s"])


def _medians(series: dict[int, Series]) -> dict[int, float | None]:
    return {np: s.median for np, s in series.items()}


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b <= 0 else a / b


def run_b11(
    reps: int,
    budget_s: float,
    notes: list[str],
    log: Callable[[str], None],
    data_path: str,
    build_model: Callable[[], Any],
    sizes: Sequence[int] = SIZES,
    batch_size: int = MODEL_BATCH_SIZE,
) -> dict:
    """
    B11: start a ``local[16]`` SparkSession, run one untimed warm-up of each launcher at the smallest np (the trivial
    job's three, then the example model's two), then up to ``reps`` rounds over ``sizes`` (np ascending; at each np
    the trivial job's launchers, then the example model's, each group's order rotating), stop the session; return
    every raw sample, the driver side's cost per call, the medians' ratios per np, the goals and the load, and under
    ``"model"`` the example model's leg (seconds and samples/s per call, the ratio of the medians' seconds).

    :param reps: rounds to run (at least one runs).
    :param budget_s: seconds (warm-up included) after which no further round starts: one starts only if it should
        end within the budget, judged by the previous round's duration.
    :param notes: where a cut round is noted (``"B11: ..."``).
    :param log: progress lines.
    :param data_path: the digits ``.npz`` (:func:`benchmarks.env.prepare_digits`) the example model trains on.
    :param build_model: the example model's ``build_model`` (:func:`benchmarks.env.load_example_model`); bare
        torchrun's script imports the same one itself.
    :param sizes: the numbers of ranks, at most :data:`CORES`.
    :param batch_size: each rank's batch in the example model's leg.
    :raises ValueError: a size above :data:`CORES` or below 1.
    :raises RuntimeError: a SparkSession of another master is already running.
    """
    from benchmarks.report import load_average

    sizes = sorted(set(sizes))
    if not sizes or sizes[0] < 1 or sizes[-1] > CORES:
        raise ValueError(f"B11 sizes must be between 1 and {CORES}, got {sizes}")
    load_start = load_average()
    spark = spark_session(CORES)
    try:
        sc = spark.sparkContext
        if sc.master != f"local[{CORES}]":
            raise RuntimeError(f"a SparkSession on {sc.master} is already running; B11 needs its own local[{CORES}]")
        conf = sc.getConf()
        threads = conf.get("spark.executorEnv.OMP_NUM_THREADS") or conf.get("spark.task.cpus", "1")
        jvm = driver_jvm()
        series = {name: {np: Series() for np in sizes} for name in CONTENDERS}
        model_series = {name: {np: Series() for np in sizes} for name in MODEL_CONTENDERS}
        model_rates = {name: {np: Series() for np in sizes} for name in MODEL_CONTENDERS}
        model_args = (data_path, build_model, batch_size, MODEL_WARMUP_STEPS, MODEL_STEPS)
        driver: dict[str, dict[int, list[dict]]] = {name: {np: [] for np in sizes} for name in (OURS, PYSPARK)}

        def call(name: str, np: int) -> tuple[float, Any, dict | None]:
            if name == TORCHRUN:
                seconds, value = run_bare_torchrun(np, threads)
                return seconds, value, None
            if name == PYSPARK:
                _torch_distributor()  # an import failure is a reason, not a timing
            run = run_ours_torch if name == OURS else run_torch_distributor
            # the ranks' and the launchers' output goes to stderr with the progress lines
            with (
                DriverSampler(jvm) as sampler,
                _cancel_after(sc, CALL_TIMEOUT_S),
                contextlib.redirect_stdout(sys.stderr),
            ):
                seconds, value = timed(lambda: run(jobs.torch_dist_trivial, np=np))
            return seconds, value, sampler.record()

        def call_model(name: str, np: int) -> tuple[float, Any]:
            if name == TORCHRUN:
                return timed(
                    lambda: run_bare(
                        "ddp",
                        data_path=data_path,
                        batch_size=batch_size,
                        warmup_steps=MODEL_WARMUP_STEPS,
                        steps=MODEL_STEPS,
                        np=np,
                    )
                )
            with _cancel_after(sc, CALL_TIMEOUT_S), contextlib.redirect_stdout(sys.stderr):
                return timed(lambda: run_ours_torch(jobs.ddp_train_throughput, *model_args, np=np))

        def attempt(name: str, np: int, counted: bool, model: bool = False) -> None:
            leg = model_series if model else series
            s = leg[name][np]
            if s.reason is not None:
                return
            label = f"B11 {name}{' example model' if model else ''} np={np}"
            settle()
            rate, cost = None, None
            try:
                if model:
                    seconds, value = call_model(name, np)
                    rate = check_model_result(value, np)
                else:
                    seconds, value, cost = call(name, np)
                    if value != float(np):
                        raise RuntimeError(f"rank 0 returned {value!r}, expected {float(np)!r}")
            except Unavailable as err:  # the launcher cannot run at all: at no np
                for other in leg[name].values():
                    other.reason = other.reason or str(err)
                return
            except Exception as err:
                s.reason = f"failed at np={np}: {type(err).__name__}: {first_line(str(err))}"
                log(f"{label}: {s.reason}")
                return
            if counted:
                s.samples.append(seconds)
                if rate is not None:
                    model_rates[name][np].samples.append(rate)
                if cost is not None:
                    driver[name][np].append(cost)
            extra = "" if rate is None else f" ({rate:,.0f} samples/s)"
            if cost is not None:
                extra = (
                    f" (python {cost['python_cpu_s']:.2f} CPU s, {cost['python_peak_rss_bytes'] / 2**20:.0f} MiB; "
                    f"JVM {num(cost['jvm_cpu_s'])} CPU s, {num(cost['jvm_peak_rss_bytes'], 2**20, 0)} MiB)"
                )
            log(f"{label}: {seconds:.2f} s{extra}{'' if counted else ' (warm-up, not counted)'}")

        start = time.monotonic()
        for name in CONTENDERS:
            attempt(name, sizes[0], counted=False)
        for name in MODEL_CONTENDERS:
            attempt(name, sizes[0], counted=False, model=True)
        rounds, last_round = 0, 0.0
        for round_no in range(reps):
            if round_no >= 1 and time.monotonic() - start + last_round > budget_s:
                notes.append(
                    f"B11: {round_no} of {reps} rounds (the next would have passed its {budget_s:.0f} s budget)"
                )
                log(f"B11: stopping after {round_no} rounds (time budget)")
                break
            round_start = time.monotonic()
            for i, np in enumerate(sizes):
                turn = (round_no + i) % len(CONTENDERS)
                for name in CONTENDERS[turn:] + CONTENDERS[:turn]:
                    attempt(name, np, counted=True)
                turn = (round_no + i) % len(MODEL_CONTENDERS)
                for name in MODEL_CONTENDERS[turn:] + MODEL_CONTENDERS[:turn]:
                    attempt(name, np, counted=True, model=True)
            rounds += 1
            last_round = time.monotonic() - round_start
            log(f"B11 round {round_no + 1} of {reps}: {last_round:.0f} s")
    finally:
        spark.stop()
    medians = {name: _medians(series[name]) for name in CONTENDERS}
    model_medians = {name: _medians(model_series[name]) for name in MODEL_CONTENDERS}
    return {
        "sizes": list(sizes),
        "contenders": list(CONTENDERS),
        "series": series,
        "medians": medians,
        "driver": driver,
        "ratios": {
            np: {
                "vs_torchrun": _ratio(medians[OURS][np], medians[TORCHRUN][np]),
                "vs_torch_distributor": _ratio(medians[OURS][np], medians[PYSPARK][np]),
            }
            for np in sizes
        },
        "goals": {"vs_torchrun": TORCHRUN_GOAL, "vs_torch_distributor": PYSPARK_GOAL},
        "rounds": rounds,
        "reps": reps,
        "omp_threads": threads,
        "master": f"local[{CORES}]",
        "sample_s": SAMPLE_S,
        "load_start": load_start,
        "load_end": load_average(),
        "model": {
            "contenders": list(MODEL_CONTENDERS),
            "series": model_series,
            "samples_per_s": model_rates,
            "medians": model_medians,
            "samples_per_s_medians": {name: _medians(model_rates[name]) for name in MODEL_CONTENDERS},
            "ratios": {np: _ratio(model_medians[OURS][np], model_medians[TORCHRUN][np]) for np in sizes},
            "batch_size": batch_size,
            "warmup_steps": MODEL_WARMUP_STEPS,
            "steps": MODEL_STEPS,
        },
    }


def driver_medians(calls: list[dict]) -> dict[str, float | None]:
    """
    The median of each driver-side number over ``calls`` (:meth:`DriverSampler.record` dicts); ``None`` where no call
    has it.

    :param calls: one np's records of one launcher.
    """
    keys = ("python_cpu_s", "jvm_cpu_s", "python_peak_rss_bytes", "jvm_peak_rss_bytes")
    out: dict[str, float | None] = {}
    for key in keys:
        values = [c[key] for c in calls if c.get(key) is not None]
        out[key] = statistics.median(values) if values else None
    return out


def num(value: float | None, scale: float = 1.0, digits: int = 2) -> str:
    """
    ``value / scale`` with ``digits`` decimals, or ``-`` when not measured (``num(rss, 2**20, 0)``: MiB).

    :param value: the number, or ``None``.
    :param scale: what to divide it by.
    :param digits: decimals.
    """
    return "-" if value is None else f"{value / scale:.{digits}f}"
