"""
``python -m benchmarks [--quick]``: run B1-B13 interleaved, print the table, write ``docs/benchmarks.md`` + PNG.

``--only b5`` (``b9``, ``b10``, ``b11``, ``b12``) rewrites only the B5 (B9, B10, B11, B12) section of an
existing page (each has a table of its own); ``--b11-sizes 2,4`` measures B11 at those numbers of ranks only.

Contenders of one benchmark run in turns (A B C A B C ...) after one untimed warm-up round, so a slow spell
of the shared machine hits all of them alike; the report uses medians.
"""

from __future__ import annotations

import argparse
import pickle
import shutil
import statistics
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path

from benchmarks.contenders import Series, Unavailable, first_line
from benchmarks.env import REPO, setup_environ

FULL = {
    "b1_reps": 5,
    "b3_reps": 3,
    "b3_warmup": 50,
    "b3_steps": 1000,
    "b2_reps": 3,
    "b4_seconds": 60.0,
    "b4_cluster_seconds": 20.0,
    "b5_reps": 3,
    "b7_reps": 5,
    "b8_reps": 3,
    "b8_epochs": 45,
    "min_reps": 2,
    "b9_reps": 3,
    "b10_reps": 3,
    "b10_airflow_reps": 3,
    "b11_reps": 3,
    "b12_seconds": 20.0,
    "b13_reps": 5,
    "b13_warmup": 20,
    "b13_steps": 800,
    "b13_batch": 8,
    "budget_s": {
        "b1": 270,
        "b3": 150,
        "b2": 200,
        "b5": 480,
        "b7": 150,
        "b8": 280,
        "b9": 360,
        "b10": 480,
        "b10_airflow": 420,
        "b11": 1000,
        "b12": 240,
        "b13": 420,
    },
}
QUICK = {
    "b1_reps": 2,
    "b3_reps": 1,
    "b3_warmup": 30,
    "b3_steps": 300,
    "b2_reps": 1,
    "b4_seconds": 15.0,
    "b4_cluster_seconds": 10.0,
    "b5_reps": 1,
    "b7_reps": 2,
    "b8_reps": 1,
    "b8_epochs": 14,
    "min_reps": 1,
    "b9_reps": 1,
    "b10_reps": 1,
    "b10_airflow_reps": 1,
    "b11_reps": 1,
    "b12_seconds": 8.0,
    "b13_reps": 1,
    "b13_warmup": 10,
    "b13_steps": 300,
    "b13_batch": 8,
    "budget_s": {
        "b1": 150,
        "b3": 60,
        "b2": 90,
        "b5": 150,
        "b7": 90,
        "b8": 90,
        "b9": 120,
        "b10": 200,
        "b10_airflow": 200,
        "b11": 180,
        "b12": 120,
        "b13": 90,
    },
}
"""Rounds per benchmark, and a time budget per benchmark (seconds, warm-up included): once the next round would
end past it, no further round starts (at least ``min_reps`` run), so a run stays bounded on a loaded machine."""
BATCH_SIZE = 32  # the example DAG's default


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def interleave(
    contenders: dict[str, Callable[[], float]],
    reps: int,
    warmup: bool = True,
    *,
    budget_s: float | None = None,
    min_reps: int = 1,
    notes: list[str] | None = None,
    label: str = "",
    rotate: bool = False,
) -> dict[str, Series]:
    """
    Run the contenders in turns, ``reps`` timed rounds after an optional untimed one; failures become reasons.
    With ``rotate``, each round starts one contender later (A B C, B C A, C A B, ...), so no contender always
    runs right after the same other one (B8: a job's wake on the shared machine falls on all alike).

    With ``budget_s``, a round after the first ``min_reps`` starts only if it should end within the budget
    (judged by the previous round's duration); a cut is recorded in ``notes``.
    """
    out = {name: Series() for name in contenders}
    start = time.monotonic()
    last_round = 0.0
    for round_no in range(-1 if warmup else 0, reps):
        if budget_s is not None and round_no >= min_reps and time.monotonic() - start + last_round > budget_s:
            if notes is not None:
                notes.append(
                    f"{label}: {round_no} of {reps} rounds (the next would have passed its {budget_s:.0f} s budget)"
                )
            log(f"{label}: stopping after {round_no} rounds (time budget)")
            break
        round_start = time.monotonic()
        names = list(contenders)
        if rotate:
            names = names[round_no % len(names) :] + names[: round_no % len(names)]
        for name in names:
            fn, series = contenders[name], out[name]
            if series.reason is not None:
                continue
            try:
                value = fn()
            except Unavailable as err:
                series.reason = str(err)
            except Exception as err:
                series.reason = f"failed: {type(err).__name__}: {first_line(str(err))}"
                traceback.print_exc()
            else:
                if round_no >= 0:
                    series.samples.append(value)
                log(f"{name}: {value:.3f}{' (warm-up, not counted)' if round_no < 0 else ''}")
        last_round = time.monotonic() - round_start
    return out


def section(results: dict, key: str, fn: Callable[[], object]) -> None:
    """Run one benchmark; an unexpected failure is recorded as the section's reason instead of ending the run."""
    start = time.perf_counter()
    try:
        results[key] = fn()
    except Exception as err:
        traceback.print_exc()
        results[key] = {"error": f"{type(err).__name__}: {first_line(str(err))}"}
    log(f"{key} done in {time.perf_counter() - start:.0f} s")


def main(argv: list[str] | None = None) -> int:
    """Parse the command line, run the selected benchmarks, print the table and write the page."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer repetitions and shorter B4 runs (~5-8 min)")
    parser.add_argument(
        "--only", default="b1,b2,b3,b4,b5,b7,b8,b9,b10,b11,b12,b13", help="comma-separated subset, e.g. b1,b3"
    )
    parser.add_argument(
        "--b11-sizes",
        default="2,4,8,16",
        metavar="N,N,...",
        help="B11's numbers of ranks (default 2,4,8,16; at most 16 each)",
    )
    parser.add_argument("--no-write", action="store_true", help="print the table only; write no files")
    parser.add_argument("--from-results", metavar="PICKLE", help="rewrite the page from a saved run; measure nothing")
    parser.add_argument("--out", default=str(REPO / "docs"), help="folder for benchmarks.md/.png (default docs/)")
    args = parser.parse_args(argv)
    if args.from_results:
        from benchmarks import report

        with open(args.from_results, "rb") as f:
            results = pickle.load(f)
        print(report.console_table(results))
        if not args.no_write:
            md_path, png_note = report.write_results(results, Path(args.out))
            log(f"wrote {md_path}; chart: {png_note}")
        return 0
    cfg = QUICK if args.quick else FULL
    only = {s.strip().lower() for s in args.only.split(",")}
    setup_environ()
    from benchmarks import report

    started = time.time()
    results: dict = {
        "config": {**cfg, "mode": "quick" if args.quick else "full", "batch_size": BATCH_SIZE},
        "meta": report.environment(),
        "notes": [],
    }
    workdir = tempfile.mkdtemp(prefix="horovod-bench-")
    try:
        return _run(args, cfg, only, results, workdir, started)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _run(args: argparse.Namespace, cfg: dict, only: set[str], results: dict, workdir: str, started: float) -> int:
    """The measurements (see :func:`main`); ``workdir`` holds the digits data."""
    from benchmarks import airflow_side, contenders, profile, report
    from benchmarks.env import load_example_model, prepare_digits, spark_session

    notes, budget = results["notes"], cfg["budget_s"]
    data_path = prepare_digits(workdir)
    build_model = load_example_model()

    if only & {"b1", "b3", "b7", "b8", "b13"}:
        log("starting the shared local[2] SparkSession")
        spark = spark_session(2)
        if "b1" in only:
            section(
                results,
                "b1",
                lambda: interleave(
                    contenders.b1_contenders(spark),
                    cfg["b1_reps"],
                    budget_s=budget["b1"],
                    min_reps=cfg["min_reps"],
                    notes=notes,
                    label="B1",
                ),
            )

            def breakdown() -> dict:
                out = {"reference": profile.reference_costs(spark), "launchers": {}}
                launchers = ("ours",) if args.quick else ("ours", "horovod.spark.run", "TorchDistributor")
                for launcher in launchers:
                    try:
                        out["launchers"][launcher] = profile.probe(launcher)
                    except Exception as err:
                        out["launchers"][launcher] = {"error": f"{type(err).__name__}: {first_line(str(err))}"}
                return out

            section(results, "b1_profile", breakdown)
        if "b3" in only:
            section(
                results,
                "b3",
                lambda: interleave(
                    contenders.b3_contenders(data_path, build_model, BATCH_SIZE, cfg["b3_warmup"], cfg["b3_steps"]),
                    cfg["b3_reps"],
                    warmup=False,
                    budget_s=budget["b3"],
                    min_reps=cfg["min_reps"],
                    notes=notes,
                    label="B3",
                ),
            )
        if "b7" in only:
            section(
                results,
                "b7",
                lambda: interleave(
                    contenders.b7_contenders(spark),
                    cfg["b7_reps"],
                    budget_s=budget["b7"],
                    min_reps=cfg["min_reps"],
                    notes=notes,
                    label="B7",
                ),
            )

            def b7_breakdown() -> dict:
                out: dict = {}
                for launcher in ("ours torch",) if args.quick else ("ours torch", "TorchDistributor"):
                    try:
                        out[launcher] = profile.probe(launcher)
                    except Exception as err:
                        out[launcher] = {"error": f"{type(err).__name__}: {first_line(str(err))}"}
                return {"launchers": out}

            section(results, "b7_profile", b7_breakdown)
        if "b8" in only:
            section(
                results,
                "b8",
                lambda: interleave(
                    contenders.b8_contenders(data_path, build_model, BATCH_SIZE, cfg["b8_epochs"]),
                    cfg["b8_reps"],
                    warmup=False,
                    budget_s=budget["b8"],
                    min_reps=cfg["min_reps"],
                    notes=notes,
                    label="B8",
                    rotate=True,
                ),
            )
        if "b13" in only:
            section(
                results,
                "b13",
                lambda: interleave(
                    contenders.b13_contenders(spark, cfg["b13_batch"], cfg["b13_warmup"], cfg["b13_steps"]),
                    cfg["b13_reps"],
                    warmup=False,
                    budget_s=budget["b13"],
                    min_reps=cfg["min_reps"],
                    notes=notes,
                    label="B13",
                    rotate=True,
                ),
            )
        spark.stop()

    if only & {"b2", "b4"}:
        sandbox = airflow_side.Sandbox(data_path)
        try:
            section(results, "airflow_migrate_s", sandbox.migrate)
            if "b2" in only:
                section(results, "b2", lambda: run_b2(sandbox, cfg, notes))
            if "b4" in only:
                section(results, "b4", lambda: run_b4(sandbox, cfg["b4_seconds"]))
                section(results, "b4_cluster", lambda: run_b4_cluster(sandbox, cfg["b4_cluster_seconds"]))
        finally:
            sandbox.close()

    if "b5" in only:
        from benchmarks import queueing

        section(results, "b5", lambda: queueing.run_b5(cfg["b5_reps"], budget["b5"], notes, log))
    if "b9" in only:
        from benchmarks import lost_executor

        section(results, "b9", lambda: lost_executor.run_b9(cfg["b9_reps"], budget["b9"], notes, log))
    if "b10" in only:
        from benchmarks import in_job_restart

        section(
            results,
            "b10",
            lambda: in_job_restart.run_b10(
                cfg["b10_reps"], budget["b10"], notes, log, cfg["b10_airflow_reps"], budget["b10_airflow"]
            ),
        )
    if "b11" in only:
        from benchmarks import scale_launch

        sizes = [int(n) for n in args.b11_sizes.split(",") if n.strip()]
        section(
            results,
            "b11",
            lambda: scale_launch.run_b11(
                cfg["b11_reps"],
                budget["b11"],
                notes,
                log,
                data_path=data_path,
                build_model=build_model,
                sizes=sizes,
                batch_size=BATCH_SIZE,
            ),
        )
    if "b12" in only:
        from benchmarks import scale_sim

        section(
            results,
            "b12",
            lambda: scale_sim.run_b12(scale_sim.SIZES, cfg["b12_seconds"], budget["b12"], notes, log),
        )

    results["meta"]["total_seconds"] = time.time() - started
    results["meta"]["load_end"] = report.load_average()
    saved = Path(tempfile.gettempdir()) / "horovod-bench-results.pkl"
    saved.write_bytes(pickle.dumps(results))
    log(f"raw results saved to {saved} (rewrite the page with --from-results {saved})")
    print(report.console_table(results))
    if not args.no_write:
        md_path, png_note = report.write_results(results, Path(args.out))
        log(f"wrote {md_path}; chart: {png_note}")
    return 0


def run_b2(sandbox, cfg: dict, notes: list[str]) -> dict:
    """B2: ``airflow dags test`` of the operator DAG vs the hand-written spark-submit, interleaved."""
    from benchmarks.airflow_side import NOOP_MARKS, OPERATOR_PHASES

    phases: list[dict[str, float]] = []
    hand_phases: list[dict[str, float]] = []
    noop_phases: list[dict[str, float]] = []
    counter = iter(range(10**6))

    execute = Series()  # the operator task's own span in each run's log: task started -> task ended

    def operator() -> float:
        seconds, parsed = sandbox.dags_test("bench_b2", f"b2-operator-{next(counter)}")
        if parsed:
            phases.append(parsed)
            execute.samples.append(sum(v for k, v in parsed.items() if k.startswith(OPERATOR_PHASES)))
        return seconds

    def hand() -> float:
        seconds, parsed = sandbox.hand_submit(f"b2-hand-{next(counter)}")
        hand_phases.append(parsed)
        return seconds

    def noop() -> float:
        seconds, parsed = sandbox.dags_test("bench_noop", f"b2-noop-{next(counter)}", marks=NOOP_MARKS)
        if parsed:
            noop_phases.append(parsed)
        return seconds

    series = interleave(
        {
            "airflow dags test + HorovodRunnerOperator": operator,
            "spark-submit by hand": hand,
            "airflow dags test of a no-op task": noop,
        },
        cfg["b2_reps"],
        warmup=False,
        budget_s=cfg["budget_s"]["b2"],
        min_reps=cfg["min_reps"],
        notes=notes,
        label="B2",
    )

    def medians(runs: list[dict[str, float]]) -> dict[str, float]:
        return {label: statistics.median(r[label] for r in runs) for label in (runs[0] if runs else {})}

    return {
        "series": series,
        "phases": medians(phases),
        "hand_phases": medians(hand_phases),
        "noop_phases": medians(noop_phases),
        "execute": execute,
    }


def run_b4(sandbox, seconds: float) -> dict:
    """B4: peak RSS per role during ``airflow dags test`` of a ~``seconds`` training run (sync mode)."""
    from benchmarks.airflow_side import NOOP_MARKS, RssSampler

    sandbox.write_b4_dag(seconds)
    sampler = RssSampler()
    wall, parsed = sandbox.dags_test("bench_b4", "b4", sampler=sampler)
    # Airflow's own share of that peak: the same `airflow dags test` of a no-op task, in the same run
    noop = RssSampler()
    sandbox.dags_test("bench_noop", "b4-noop", sampler=noop, marks=NOOP_MARKS)
    return {
        "train_seconds": seconds,
        "wall_seconds": wall,
        "peak_bytes": dict(sampler.peak),
        "samples": sampler.samples,
        "interval_s": sampler.interval,
        "phases": parsed,
        "process_names": {role: sorted(names) for role, names in sampler.seen.items()},
        "noop_peak_airflow": noop.peak["airflow"],
        "noop_samples": noop.samples,
    }


def run_b4_cluster(sandbox, seconds: float) -> dict:
    """
    B4, cluster deploy mode on a standalone master + 2 workers (127.0.0.1): ``airflow dags test`` of a
    ~``seconds`` training run, synchronous and deferrable. Per run: wall time, the phases from the log, the
    seconds a worker is held (task code running), and, sampled every 0.2 s, the processes below the Airflow
    process and its RSS while the job runs (deferrable: while the trigger waits; sync: while ``execute`` polls).
    """
    from benchmarks.airflow_side import DEFER_MARKS, SYNC_MARKS, RssSampler, mark_times
    from tests.standalone import standalone_cluster

    out: dict = {"train_seconds": seconds}
    with standalone_cluster(workers=2, cores_per_worker=2, work_dir=sandbox.root / "standalone") as cluster:
        sandbox.write_b4_cluster_dags(seconds, cluster)
        for mode, marks, window_at in (("sync", SYNC_MARKS, 1), ("deferred", DEFER_MARKS, 2)):
            sampler = RssSampler()
            tag = f"b4-cluster-{mode}"
            wall, phases = sandbox.dags_test(f"bench_b4_cluster_{mode}", tag, sampler=sampler, marks=marks)
            times = mark_times((sandbox.root / f"{tag}.log").read_text(errors="replace"), marks)
            window = (times[window_at], times[window_at + 1]) if times else None
            inside = [(n, rss) for t, n, rss in sampler.timeline if window and window[0] <= t <= window[1]]
            out[mode] = {
                "wall_seconds": wall,
                "phases": phases,
                "held_seconds": sum(v for k, v in phases.items() if k.startswith("task holds a worker"))
                if phases
                else None,
                "window_seconds": window[1] - window[0] if window else None,
                "window_samples": len(inside),
                "max_children": max((n for n, _ in inside), default=None),
                "peak_rss": max((rss for _, rss in inside), default=None),
                "samples": sampler.samples,
            }
            log(f"B4 cluster {mode}: {wall:.1f} s, worker held {out[mode]['held_seconds']}")
    return out


if __name__ == "__main__":
    sys.exit(main())
