"""
B5's part of ``docs/benchmarks.md``: its table and its section between :data:`B5_START` and :data:`B5_END` (which
``python -m benchmarks --only b5`` rewrites alone).
"""

from __future__ import annotations

from benchmarks.rows import seconds as _s

B5_START = "<!-- B5 section: written by benchmarks (python -m benchmarks --only b5 rewrites it alone) -->"
B5_END = "<!-- end of the B5 section -->"


def b5_table(results: dict) -> list[str]:
    """
    B5's Markdown table: each contender's queueing cost against the goal.

    :param results: the run's results dict.
    """
    from benchmarks.queueing import GOAL_S

    b5 = results["b5"]
    lines = ["| Contender | Queueing cost (median) | Samples | Goal | Verdict |", "|---|---|---|---|---|"]
    if "error" in b5:
        return lines + [f"| (whole benchmark) | could not run: {b5['error']} |  |  |  |"]
    few = results.get("config", {}).get("min_reps", 2) < 2
    for name, label in b5["contenders"].items():
        series = b5["series"][name]
        goal = f"< {GOAL_S:.0f} s" if name == "ours" else ""
        verdict = ""
        if name == "ours" and series.median is not None:
            verdict = ("met" if series.median < GOAL_S else "missed") + (" (quick run: indicative)" if few else "")
        lines.append(
            f"| {label} | {series.reason or _s(series.median)} | "
            f"{', '.join(f'{v:.2f}' for v in series.samples)} | {goal} | {verdict} |"
        )
    return lines


def standalone_run_line(results: dict, name: str) -> str:
    """
    The line a section written alone (``--only <name>``) opens with: its date, mode, duration, machine load and
    versions, since the rest of the page comes from an earlier run.

    :param results: the run's results dict.
    :param name: the benchmark, e.g. ``"b5"``.
    """
    meta = results["meta"]
    loads = [x for x in (meta.get("load_start"), meta.get("load_end")) if x]
    v = meta.get("versions", {})
    return (
        f"Measured by `python -m benchmarks --only {name}` on {meta['date']} ({results['config']['mode']} "
        f"run, {meta.get('total_seconds', 0) / 60:.1f} min), separately from the sections above; "
        f"1-minute load average at its start / end: {' / '.join(f'{x[0]:.1f}' for x in loads)} on "
        f"{meta['cores']} cores; pyspark {v.get('pyspark')}, horovod {v.get('horovod')}, torch "
        f"{v.get('torch')}."
    )


def section_opening(start_mark: str, heading: str, results: dict, name: str, standalone_run: bool) -> list[str]:
    """
    The first lines of a benchmark's own section: its start marker, its heading and, for a section written alone
    into a page from an earlier run, :func:`standalone_run_line`.

    :param start_mark: the section's start marker.
    :param heading: its ``## ...`` heading.
    :param results: the run's results dict.
    :param name: the benchmark, e.g. ``"b5"``.
    :param standalone_run: the run measured this benchmark alone (``--only <name>``).
    """
    out = [start_mark, heading, ""]
    if standalone_run:
        out += [standalone_run_line(results, name), ""]
    return out


def b5_section(results: dict, standalone_run: bool = False) -> list[str]:
    """
    The B5 section, between :data:`B5_START` and :data:`B5_END`: table, where the time goes, reading, method.

    :param results: the run's results dict.
    :param standalone_run: the section is written into a page from an earlier full run (``--only b5``): it
        then states its own date, machine load and versions.
    """
    from benchmarks.queueing import GOAL_S, PHASES, phases

    b5 = results["b5"]
    out = section_opening(B5_START, "## B5 queueing on a busy cluster", results, "b5", standalone_run)
    out += [
        "Time from one np=4 job freeing its task slots to the next, waiting, np=4 job's ranks starting, on a "
        "Spark standalone cluster of 2 workers x 2 cores (127.0.0.1) whose 4 slots the first job holds. Goal: "
        f"under {GOAL_S:.0f} s.",
        "",
        *b5_table(results),
        "",
    ]
    if "error" in b5:
        return out + [B5_END]
    for note in results.get("notes", []):
        if note.startswith("B5"):
            out += [f"Time budget: {note}.", ""]
    steps = {name: phases(rounds) for name, rounds in b5["rounds"].items() if rounds}
    if steps:
        names = list(steps)
        out += [
            "Where the time goes (medians, seconds from the holding job's `HorovodRunner.run` returning; the "
            "cluster's steps from its own logs, to the millisecond, the last executor's for each):",
            "",
            "| Step | " + " | ".join(b5["contenders"][n] for n in names) + " |",
            "|---|" + "---|" * len(names),
        ]
        for key, label in PHASES.items():
            out.append(
                f"| {label} | "
                + " | ".join(_s(steps[n][key]) if steps[n][key] is not None else "-" for n in names)
                + " |"
            )
        out.append("")
    ours = steps.get("ours")
    retry = b5["rounds"].get("spark-retry") or []
    if ours and all(v is not None for v in ours.values()):
        o = ours
        out += [
            f"**Reading.** The holding job's application ends as its `SparkContext.stop()` begins: the master "
            f"launches the waiting job's executors {_s(o['launched'])} after the return (the stop itself returns "
            f"at {_s(o['stopped'])}, off the path). Starting those executor JVMs until the last registers with the "
            f"waiting driver takes {_s(o['registered'] - o['launched'])}, the largest step; the driver's wait sees "
            f"the slots {_s(o['slots_seen'] - o['registered'])} later (its poll interval is {poll_interval()} s) "
            f"and the barrier tasks are on the executors {_s(o['assigned'] - o['slots_seen'])} after that (the "
            f"stage's RDD already exists in the JVM: only the job is submitted). The executors fetch the runtime "
            f"zip and the task and start Python in {_s(o['python'] - o['assigned'])}; each task then has its rank "
            f"process {_s(o['created'] - o['python'])} later (PySpark's daemon and worker start, the task "
            f"unpickled, the rank spawned at once: the daemon the hooks select imports PySpark compiled, not from "
            f"Spark's source-only `pyspark.zip`, `runtime/task/pyspark_daemon.py`). The rank then needs "
            f"{_s(o['entry'] - o['created'])} more to start its interpreter, get the rendezvous port that task "
            f"0's server shares through the tasks' `allGather`, and unpickle the function; most of that is the "
            f"`allGather` (a plain two-task `allGather` took 1.0 s on this machine too, as did a `barrier()`: "
            f"Spark's barrier sync answers in whole seconds), which a real training function "
            f"spends importing its framework (the rank imports it meanwhile). The provider's own share of the "
            f"{_s(o['created'])}: the poll, at most {poll_interval()} s.",
            "",
        ]
    if retry:
        import statistics

        warn = statistics.median(r["warn_lines"] for r in retry)
        mine, theirs = b5["series"]["ours"].median, b5["series"]["spark-retry"].median
        if mine is not None and theirs is not None:
            gap = theirs - mine
            same = abs(gap) <= max(1.0, 0.15 * mine)
            compare = (
                "about as fast as the provider's wait (within 15%)"
                if same
                else f"{abs(gap):.2f} s {'slower' if gap > 0 else 'faster'} than the provider's wait (medians)"
            )
        else:
            compare = "not comparable in this run"
        out += [
            f"**The alternative.** Letting Spark's own barrier check retry instead (interval 1 s, the shortest "
            f"it allows: it is read in seconds) handed the slots over {compare}; it logged {warn:.0f} WARN "
            "lines (median per round) while the job waited, one per retry, and it can neither say who "
            'holds the cores nor tell "busy" from "never". The provider waits on the driver '
            "(`airflow_provider_horovod/runtime/driver/slots.py` explains the choice).",
            "",
        ]
    out += [
        "Method: a chain of np=4 jobs, each `HorovodRunner` in a SparkSession of its own (like the driver "
        "program spark-submit runs), whose ranks wait for a gate file: while one job holds all 4 slots, the next "
        "starts and waits; the harness opens the holder's gate once the next one says it waits. Each job prints "
        "the time `HorovodRunner.run` returned and the time `spark.stop()` returned; rank 0 returns its "
        "process's creation time (its start tick in /proc, to 10 ms) and the time its function was entered; "
        "the harness timestamps the "
        '"task slots available" line as it arrives. One machine, so the clocks agree. The waiting job '
        "alternates between the contenders; executors at Spark's standalone default (one per worker, "
        "`spark.cores.max=4`); driver and executor JVMs with the options the provider's hooks give the "
        f"applications they submit (`{jvm_options()}`, `utils/spark_conf.py`), and their Python daemon "
        f"(`spark.python.daemon.module={daemon_module()}`).",
        B5_END,
    ]
    return out


def jvm_options() -> str:
    """The JVM options B5's applications get (the hooks' own), as the harness passes them."""
    from airflow_provider_horovod.utils.spark_conf import JVM_STARTUP_OPTIONS

    return JVM_STARTUP_OPTIONS


def daemon_module() -> str:
    """The Python daemon module B5's applications get (the hooks' own)."""
    from airflow_provider_horovod.utils.spark_conf import PYTHON_DAEMON_MODULE

    return PYTHON_DAEMON_MODULE


def poll_interval() -> float:
    """The driver-side wait's poll interval, seconds (``runtime/driver/slots.py``)."""
    from airflow_provider_horovod.runtime.driver.slots import POLL_INTERVAL_S

    return POLL_INTERVAL_S
