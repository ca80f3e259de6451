"""
The contenders of B1/B7 (launch overhead) and B3/B8 (training throughput): in-process ones on the shared
SparkSession, and the bare launchers (``horovodrun``, ``torchrun``) as subprocesses on the same machine.

Each contender is a zero-argument callable that runs one job and returns a measurement; it raises
:class:`Unavailable` (with the exact reason) when it cannot run at all, e.g. ``horovod.spark`` fails to import.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from benchmarks import jobs
from benchmarks.env import PYTHON, bench_environ


@dataclass
class Series:
    """One contender's measurements, or why it could not run."""

    samples: list[float] = field(default_factory=list)
    reason: str | None = None

    @property
    def median(self) -> float | None:
        return statistics.median(self.samples) if self.samples else None


class Unavailable(Exception):
    """A contender cannot run here; the message goes into the table instead of a number."""


def _horovod_spark():
    try:
        import horovod.spark
    except Exception as err:  # ImportError, but also pyarrow/distutils breakage raising other errors
        raise Unavailable(f"`import horovod.spark` failed: {type(err).__name__}: {err}") from err
    return horovod.spark


def _torch_distributor():
    try:
        from pyspark.ml.torch.distributor import TorchDistributor
    except Exception as err:
        raise Unavailable(
            f"`from pyspark.ml.torch.distributor import TorchDistributor` failed: {type(err).__name__}: {err}"
        ) from err
    return TorchDistributor


def first_line(text: str) -> str:
    """
    The first non-blank line of ``text``, stripped and cut at 300 characters: a failure's reason in a table cell.

    :param text: e.g. an exception's message.
    """
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[0][:300] if lines else ""


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    """Wall seconds of ``fn()`` and its value."""
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


# --- B1 -------------------------------------------------------------------------------------------------------


def run_ours(fn: Callable[..., Any], np: int = 2, artifact_dir: str | None = None, **kwargs: Any) -> Any:
    """``HorovodRunner(np, artifact_dir).run(fn, **kwargs)``: rank 0's value."""
    from airflow_provider_horovod.runtime import HorovodRunner

    return HorovodRunner(np=np, artifact_dir=artifact_dir).run(fn, **kwargs)


def run_horovod_spark(fn: Callable[..., Any], np: int = 2, **kwargs: Any) -> Any:
    """``horovod.spark.run(fn, kwargs, num_proc=np, use_gloo=True)``: rank 0's value (it returns every rank's)."""
    hs = _horovod_spark()
    return hs.run(fn, kwargs=kwargs, num_proc=np, use_gloo=True, verbose=0)[0]


def run_torch_distributor(fn: Callable[..., Any], *args: Any, np: int = 2) -> Any:
    """PySpark's ``TorchDistributor(num_processes=np, local_mode=False, use_gpu=False).run(fn, *args)``: rank 0's
    value."""
    td = _torch_distributor()
    return td(num_processes=np, local_mode=False, use_gpu=False).run(fn, *args)


def run_ours_torch(fn: Callable[..., Any], *args: Any, np: int = 2) -> Any:
    """This provider's ``TorchDistributor(num_processes=np, local_mode=False, use_gpu=False).run(fn, *args)``."""
    from airflow_provider_horovod.runtime import TorchDistributor

    return TorchDistributor(num_processes=np, local_mode=False, use_gpu=False).run(fn, *args)


def b1_contenders(spark) -> dict[str, Callable[[], float]]:
    """B1: seconds from the call to rank 0's value of a trivial np=2 job, per launcher, plus the floor's parts."""
    sc = spark.sparkContext

    def check(value: Any, expected: float = 2.0) -> None:
        if value != expected:
            raise RuntimeError(f"rank 0 returned {value!r}, expected {expected!r}")

    def ours() -> float:
        seconds, value = timed(lambda: run_ours(jobs.hvd_trivial))
        check(value)
        return seconds

    def horovod_spark() -> float:
        _horovod_spark()  # an import failure is a reason, not a timing
        seconds, value = timed(lambda: run_horovod_spark(jobs.hvd_trivial))
        check(value)
        return seconds

    def torch_distributor() -> float:
        _torch_distributor()
        seconds, value = timed(lambda: run_torch_distributor(jobs.torch_dist_trivial))
        check(value)
        return seconds

    def floor_import() -> float:
        return fresh_import_seconds("import torch, horovod.torch")

    def floor_barrier() -> float:
        seconds, value = timed(lambda: sc.parallelize(range(2), 2).barrier().mapPartitions(lambda it: [1]).collect())
        check(value, [1, 1])
        return seconds

    return {
        "ours": ours,
        "horovod.spark.run": horovod_spark,
        "TorchDistributor": torch_distributor,
        "floor: fresh import": floor_import,
        "floor: empty barrier job": floor_barrier,
    }


def b7_contenders(spark) -> dict[str, Callable[[], float]]:
    """B7: seconds from the call to rank 0's value of a trivial np=2 DDP job (gloo, one all_reduce), per
    ``TorchDistributor``, plus the floor's parts (2 fresh interpreters importing torch at once; empty barrier job)."""
    sc = spark.sparkContext

    def check(value: Any, expected: Any = 2.0) -> None:
        if value != expected:
            raise RuntimeError(f"rank 0 returned {value!r}, expected {expected!r}")

    def ours() -> float:
        seconds, value = timed(lambda: run_ours_torch(jobs.torch_dist_trivial))
        check(value)
        return seconds

    def torch_distributor() -> float:
        _torch_distributor()
        seconds, value = timed(lambda: run_torch_distributor(jobs.torch_dist_trivial))
        check(value)
        return seconds

    def floor_import() -> float:
        return fresh_import_seconds("import torch", processes=2)

    def floor_barrier() -> float:
        seconds, value = timed(lambda: sc.parallelize(range(2), 2).barrier().mapPartitions(lambda it: [1]).collect())
        check(value, [1, 1])
        return seconds

    return {
        "ours": ours,
        "TorchDistributor": torch_distributor,
        "floor: fresh import": floor_import,
        "floor: empty barrier job": floor_barrier,
    }


def fresh_import_seconds(statement: str, processes: int = 1) -> float:
    """Wall seconds for ``processes`` fresh interpreters started together to run ``statement`` and exit."""
    env = bench_environ()
    start = time.perf_counter()
    procs = [
        subprocess.Popen([PYTHON, "-c", statement], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        for _ in range(processes)
    ]
    for p in procs:
        _, err = p.communicate()
        if p.returncode != 0:
            raise Unavailable(f"`python -c {statement!r}` failed: {err.decode(errors='replace').strip()[-300:]}")
    return time.perf_counter() - start


# --- B3 -------------------------------------------------------------------------------------------------------


def b3_contenders(data_path: str, build_model, batch_size: int, warmup: int, steps: int) -> dict[str, Callable]:
    """B3: global samples/s of the example model over ``steps`` timed steps (after ``warmup``), per launcher/np."""
    kwargs = dict(data_path=data_path, build_model=build_model, batch_size=batch_size, warmup_steps=warmup, steps=steps)

    def ours_np2() -> float:
        return run_ours(jobs.hvd_train_throughput, np=2, **kwargs)["samples_per_s"]

    def horovod_spark_np2() -> float:
        return run_horovod_spark(jobs.hvd_train_throughput, np=2, **kwargs)["samples_per_s"]

    def ours_np1() -> float:
        return run_ours(jobs.hvd_train_throughput, np=1, **kwargs)["samples_per_s"]

    def bare_horovodrun() -> float:
        return run_bare("hvd", **kwargs)["samples_per_s"]

    def ours_np2_reporting() -> float:
        import tempfile

        with tempfile.TemporaryDirectory(prefix="b3-report-") as artifacts:  # the files are written, as in a DAG
            return run_ours(jobs.hvd_train_throughput, np=2, artifact_dir=artifacts, report_steps=True, **kwargs)[
                "samples_per_s"
            ]

    return {
        "ours np=2": ours_np2,
        "horovod.spark.run np=2": horovod_spark_np2,
        "bare horovodrun -np 2 --gloo": bare_horovodrun,
        "ours np=2, report() every step": ours_np2_reporting,
        "ours np=1": ours_np1,
    }


# --- bare launchers (B3, B8, B11) ------------------------------------------------------------------------------

BARE_MODULE = "benchmarks.bare_throughput"
"""Run as a module (``-m``): as a script, its folder would come first on ``sys.path``, and ``benchmarks/profile.py``
would shadow the standard library's ``profile`` (which torch imports)."""
BARE_TIMEOUT_S = 300


def bare_command(job: str, np: int = 2) -> list[str]:
    """
    The launcher's command line before the script: ``torchrun`` (``ddp``) or ``horovodrun`` (``hvd``).

    :param job: ``"ddp"`` or ``"hvd"``.
    :param np: the number of ranks (``--nproc_per_node``, ``-np``); B3 and B8 use 2, B11 its sizes.
    """
    bin_dir = os.path.dirname(PYTHON)
    if job == "ddp":
        return [os.path.join(bin_dir, "torchrun"), "--standalone", f"--nproc_per_node={np}", "-m", BARE_MODULE]
    return [
        os.path.join(bin_dir, "horovodrun"),
        "-np",
        str(np),
        "--gloo",
        "-H",
        f"localhost:{np}",
        "--network-interfaces",
        "lo",
        PYTHON,
        "-m",
        BARE_MODULE,
    ]


def run_bare(
    job: str,
    *,
    data_path: str,
    build_model=None,
    batch_size: int,
    warmup_steps: int,
    steps: int,
    np: int = 2,
) -> dict:
    """
    The throughput job under a bare launcher (:data:`BARE_MODULE`, same function and model as in Spark); rank 0's
    result. ``build_model`` is unused (the script imports the example's own).

    :param job: ``"ddp"`` (``torchrun``) or ``"hvd"`` (``horovodrun``).
    :param data_path: the digits ``.npz``.
    :param build_model: unused.
    :param batch_size: each rank's batch.
    :param warmup_steps: untimed steps per rank.
    :param steps: timed steps per rank.
    :param np: the number of ranks (B3 and B8: 2).
    :raises Unavailable: the launcher's executable is missing.
    :raises RuntimeError: the launcher failed (its output's tail in the message).
    """
    cmd = bare_command(job, np)
    if not os.path.exists(cmd[0]):
        raise Unavailable(f"{cmd[0]} not found")
    with tempfile.TemporaryDirectory(prefix="bench-bare-") as tmp:
        out = os.path.join(tmp, "result.json")
        args = [
            "--job",
            job,
            "--data-path",
            data_path,
            "--batch-size",
            str(batch_size),
            "--warmup-steps",
            str(warmup_steps),
            "--steps",
            str(steps),
            "--out",
            out,
        ]
        env = {**os.environ, **bench_environ()}
        proc = subprocess.run([*cmd, *args], env=env, capture_output=True, text=True, timeout=BARE_TIMEOUT_S, cwd=tmp)
        if proc.returncode != 0 or not os.path.exists(out):
            raise RuntimeError(
                f"{os.path.basename(cmd[0])} exited {proc.returncode}: {(proc.stdout + proc.stderr).strip()[-600:]}"
            )
        with open(out) as f:
            return json.load(f)


# --- B8 -------------------------------------------------------------------------------------------------------


def b8_contenders(data_path: str, build_model, batch_size: int, epochs: int) -> dict[str, Callable]:
    """
    B8: steady-state global samples/s of the example model trained with DDP (one epoch untimed, then ``epochs``
    timed), per launcher; and the same under Horovod (``HorovodRunner``, same steps) for DDP vs Horovod.
    """
    spe = jobs.steps_per_epoch(data_path, batch_size, 2)
    args = (data_path, build_model, batch_size, spe, spe * epochs)
    kwargs = dict(
        data_path=data_path, build_model=build_model, batch_size=batch_size, warmup_steps=spe, steps=spe * epochs
    )

    def ours() -> float:
        return run_ours_torch(jobs.ddp_train_throughput, *args)["samples_per_s"]

    def torch_distributor() -> float:
        return run_torch_distributor(jobs.ddp_train_throughput, *args)["samples_per_s"]

    def bare_torchrun() -> float:
        return run_bare("ddp", **kwargs)["samples_per_s"]

    def horovod() -> float:
        return run_ours(jobs.hvd_train_throughput, np=2, **kwargs)["samples_per_s"]

    return {
        "ours DDP": ours,
        "TorchDistributor DDP": torch_distributor,
        "bare torchrun DDP": bare_torchrun,
        "ours Horovod (HorovodRunner)": horovod,
    }


# --- B13 ------------------------------------------------------------------------------------------------------

TRAINER_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scripts", "trainer_throughput.py")
"""B13's Transformers ``Trainer`` script, the same file under every launcher (in a folder of its own: see its
docstring)."""
TRAINER_WORLD_SIZE = 2


def _trainer_result(out_dir: str, progress: bool, threads: str) -> float:
    """
    Global samples/s from the script's ``result.json`` in ``out_dir``, checked: world size 2, ``threads`` torch
    threads on rank 0, and this provider's progress callback on the ``Trainer`` exactly when ``progress``.

    :raises RuntimeError: no result, another world size or thread count, or the callback where it should not be
        (or missing).
    """
    path = os.path.join(out_dir, "result.json")
    if not os.path.exists(path):
        raise RuntimeError(f"the script wrote no {path}")
    with open(path) as f:
        result = json.load(f)
    if result.get("world_size") != TRAINER_WORLD_SIZE:
        raise RuntimeError(
            f"the Trainer ran with world_size {result.get('world_size')!r}, not {TRAINER_WORLD_SIZE} "
            "(ranks training alone: not comparable)"
        )
    if str(result.get("torch_threads")) != threads:
        raise RuntimeError(f"rank 0 ran {result.get('torch_threads')!r} torch threads, not {threads} (OMP_NUM_THREADS)")
    if bool(result.get("progress_callback")) != progress:
        raise RuntimeError(
            f"the library progress callback was {'missing from' if progress else 'on'} the Trainer "
            f"(progress_callback={result.get('progress_callback')!r})"
        )
    return float(result["samples_per_s"])


def b13_contenders(spark, batch_size: int, warmup: int, steps: int) -> dict[str, Callable[[], float]]:
    """
    B13: steady-state global samples/s of :data:`TRAINER_SCRIPT` (a Transformers ``Trainer``), np=2 on CPU with
    gloo, per launcher: ours ``TorchDistributor`` with its library progress callback (the default), the same with
    ``HOROVOD_AIRFLOW_LIBRARY_PROGRESS=0``, and bare ``torchrun --standalone --nproc_per_node=2`` with
    ``ACCELERATE_USE_CPU=true`` (what ours sets for CPU ranks; without it each torchrun process trains alone) and
    the ``OMP_NUM_THREADS`` our barrier-task ranks get (Spark's Python worker's: ``spark.task.cpus``, unless
    ``spark.executorEnv.OMP_NUM_THREADS`` sets it).
    """
    script_args = ["--batch-size", str(batch_size), "--warmup-steps", str(warmup), "--steps", str(steps)]
    conf = spark.sparkContext.getConf()
    threads = conf.get("spark.executorEnv.OMP_NUM_THREADS") or conf.get("spark.task.cpus", "1")

    def ours(env: dict[str, str] | None, progress: bool) -> float:
        from airflow_provider_horovod.runtime import TorchDistributor

        # the ranks' output (the Trainer's logs) and the progress lines go to stderr, as the harness's progress
        with tempfile.TemporaryDirectory(prefix="b13-ours-") as out, contextlib.redirect_stdout(sys.stderr):
            TorchDistributor(num_processes=TRAINER_WORLD_SIZE, local_mode=False, use_gpu=False, env=env).run(
                TRAINER_SCRIPT, out, *script_args
            )
            return _trainer_result(out, progress, threads)

    def bare_torchrun() -> float:
        torchrun = os.path.join(os.path.dirname(PYTHON), "torchrun")
        if not os.path.exists(torchrun):
            raise Unavailable(f"{torchrun} not found")
        cmd = [torchrun, "--standalone", f"--nproc_per_node={TRAINER_WORLD_SIZE}", TRAINER_SCRIPT]
        env = {**os.environ, **bench_environ(), "ACCELERATE_USE_CPU": "true", "OMP_NUM_THREADS": threads}
        with tempfile.TemporaryDirectory(prefix="b13-bare-") as out:
            proc = subprocess.run(
                [*cmd, out, *script_args], env=env, capture_output=True, text=True, timeout=BARE_TIMEOUT_S, cwd=out
            )
            if proc.returncode != 0:
                output = proc.stdout + proc.stderr
                causes = [line for line in output.splitlines() if re.search(r"Error|terminate called|what\(\)", line)]
                raise RuntimeError(
                    f"torchrun exited {proc.returncode}: {' | '.join(causes[:6])[:800]} ... {output.strip()[-300:]}"
                )
            return _trainer_result(out, False, threads)

    return {
        "ours": lambda: ours(None, True),
        "ours, library progress off": lambda: ours({"HOROVOD_AIRFLOW_LIBRARY_PROGRESS": "0"}, False),
        "bare torchrun": bare_torchrun,
    }
