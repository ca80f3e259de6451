"""
B10's part of ``docs/benchmarks.md``: its section between :data:`B10_START` and :data:`B10_END` (which
``python -m benchmarks --only b10`` rewrites alone).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from datetime import datetime

from benchmarks.pages_b5 import section_opening
from benchmarks.rows import seconds as _s

B10_START = "<!-- B10 section: written by benchmarks (python -m benchmarks --only b10 rewrites it alone) -->"
B10_END = "<!-- end of the B10 section -->"


def b10_table(results: dict) -> list[str]:
    """
    B10's Markdown table: kill -> first step after it on both paths, their ratio, and the work lost.

    :param results: the run's results dict.
    """
    b10 = results["b10"]
    lines = ["| Measure | Median | Rounds | Goal | Verdict |", "|---|---|---|---|---|"]
    if "error" in b10:
        return lines + [f"| (whole benchmark) | could not run: {b10['error']} |  |  |  |"]
    rounds = b10["rounds"]
    few = results.get("config", {}).get("min_reps", 2) < 2 or len(rounds) < 2
    quick = " (quick run: indicative)" if few else ""

    def row(label: str, key: str, fmt, goal: str = "", verdict: str = "") -> str:
        return _row(rounds, label, key, fmt, goal, verdict)

    ratio_verdict = ("met" if b10["median_ratio"] <= b10["ratio_goal"] else "missed") + quick
    lost_verdict = ("met" if b10["max_in_job_lost_intervals"] <= b10["lost_goal"] else "missed") + quick
    spot = b10["spot"]
    planned = b10["steps"] + len(spot["timeline"]) * b10["interval"]
    spot_verdict = "met" if spot["total_steps"] <= planned and spot["restarts"] == len(spot["timeline"]) else "missed"
    return lines + [
        *through_airflow_rows(b10, quick),
        row("kill -> first step after it, a retry started at once (client scripts, no Airflow)", "retry_s", _s),
        row("kill -> first step after it, in-job restart (`max_restarts=1`, client script)", "in_job_s", _s),
        *(
            [row("of which: kill -> the replacement executor's slot (in-job)", "in_job_slots_s", _s)]
            if _slots_timed(rounds)
            else []
        ),
        row(
            "in-job / retry started at once",
            "ratio",
            _ratio,
            f"<= {b10['ratio_goal']:.2f}x (median)",
            ratio_verdict,
        ),
        *(
            [
                row(
                    "work lost per fault, retry started at once (steps trained again / checkpoint interval)",
                    "retry_lost_intervals",
                    _f2,
                )
            ]
            if all("retry_lost_intervals" in r for r in rounds)
            else []
        ),
        row(
            "work lost per fault, in-job (steps trained again / checkpoint interval)",
            "in_job_lost_intervals",
            _f2,
            f"<= {b10['lost_goal']:.1f} (every round)",
            lost_verdict,
        ),
        *(
            [
                f"| kill -> first step after it, in-job restart with a spare executor (`spark.cores.max=3`; "
                f"informational, one round) | {_spare(b10['spare'])} |  |  |  |"
            ]
            if "spare" in b10
            else []
        ),
        f"| spot simulation: {len(spot['timeline'])} kills in one try, steps trained in all | "
        f"{spot['total_steps']} |  | <= {planned} (planned {b10['steps']} + {len(spot['timeline'])} intervals), "
        f"one try | {spot_verdict} |",
    ]


def through_airflow_rows(b10: dict, quick: str) -> list[str]:
    """
    The rows of the rounds run by a real Airflow deployment (:mod:`benchmarks.airflow_restart`): both paths' kill ->
    first step, the retry's Airflow part, their ratio against the goal, and the work lost. Empty for a run without them.

    :param b10: the B10 results.
    :param quick: the verdict's suffix for a quick run ("" or " (quick run: indicative)").
    """
    through = b10.get("airflow")
    if not through:
        return []
    if "error" in through:
        return [f"| (the rounds through Airflow) | could not run: {through['error']} |  |  |  |"]
    rounds = through["rounds"]

    def row(label: str, key: str, fmt=_s, goal: str = "", verdict: str = "") -> str:
        return _row(rounds, label, key, fmt, goal, verdict)

    few = " (quick run: indicative)" if len(rounds) < 2 else quick
    verdict = ("met" if through["median_ratio"] <= b10["ratio_goal"] else "missed") + few
    return [
        row(
            "kill -> first step after it, **Airflow retry** (`retries=1, retry_delay=0`; a real deployment)", "retry_s"
        ),
        row("of which: kill -> Airflow recorded the failed try", "failed_try_end_s"),
        row("of which: kill -> Airflow started the retry", "retry_start_s"),
        row("kill -> first step after it, **in-job restart** (`max_restarts=1`; the same deployment)", "in_job_s"),
        row(
            "**in-job / Airflow retry**, through Airflow",
            "ratio",
            _ratio,
            f"<= {b10['ratio_goal']:.2f}x (median)",
            verdict,
        ),
        row("work lost per fault through Airflow, retry (checkpoint intervals)", "retry_lost_intervals", _f2),
        row(
            "work lost per fault through Airflow, in-job (checkpoint intervals)",
            "in_job_lost_intervals",
            _f2,
            f"<= {b10['lost_goal']:.1f} (every round)",
            ("met" if max(r["in_job_lost_intervals"] for r in rounds) <= b10["lost_goal"] else "missed") + few,
        ),
    ]


def _row(rounds: list[dict], label: str, key: str, fmt: Callable[[float], str], goal: str, verdict: str) -> str:
    """A table row: ``label``, the median of the rounds' ``key`` and each round's (by ``fmt``), goal, verdict."""
    values = [r[key] for r in rounds]
    return f"| {label} | {fmt(statistics.median(values))} | {', '.join(fmt(v) for v in values)} | {goal} | {verdict} |"


def _f2(value: float) -> str:
    return f"{value:.2f}"


def _ratio(value: float) -> str:
    return f"{value:.3f}x"  # three places: a median at the goal must not read as 0.25x "missed"


def _airflow_rounds(b10: dict) -> list[dict] | None:
    """The rounds run through Airflow; ``None`` for a run without them, or whose Airflow part failed."""
    return (b10.get("airflow") or {}).get("rounds")


def _slots_timed(rounds: list[dict]) -> bool:
    """Whether every round timed its restart's wait for a slot (runs from before that was measured did not)."""
    return all(r.get("in_job_slots_s") is not None for r in rounds)


def _spare(spare: dict) -> str:
    """The spare-executor round's time to its first step, or why it has none."""
    if "error" in spare:
        return f"could not run: {spare['error']}"
    waited = f" (of which waiting for slots {_s(spare['slots_s'])})" if spare.get("slots_s") is not None else ""
    return _s(spare["to_first_step_s"]) + waited


def where_the_time_goes(b10: dict) -> list[str]:
    """
    The paragraph on the in-job path's floor: how much of its time is Spark replacing the lost executor, against what
    the ratio goal allows. Empty for a run from before the replacement was timed.

    :param b10: the B10 results.
    """
    rounds = b10["rounds"]
    if not _slots_timed(rounds):
        return []
    slot = statistics.median(r["in_job_slots_s"] for r in rounds)
    rest = statistics.median(r["in_job_s"] - r["in_job_slots_s"] for r in rounds)
    allowed = b10["ratio_goal"] * statistics.median(r["retry_s"] for r in rounds)
    spare = b10.get("spare") or {}
    return [
        f"Where the in-job time goes (medians of the rounds): {_s(slot)} pass before the lost rank has a slot again, "
        "the time Spark's standalone master takes to start a replacement executor JVM (`spark.cores.max=2`: the "
        f"application has no spare slot); the other {_s(rest)} are the barrier stage's launch on that fresh "
        "executor (its first Python worker), the ranks forked from the job's fork server on the host (torch and "
        "Horovod imported there: `runtime/rank/fork_server.py`), the tasks' gather through the driver, Gloo's "
        f"rendezvous, the resume and one step. The goal allows {_s(allowed)} in all ({b10['ratio_goal']:.2f} x the "
        "script retry's median)"
        + (
            f". With a spare executor the restart took {_s(spare['to_first_step_s'])} (row above): no slot is "
            "waited for, but the spare's first Python worker is cold, and (seen in one traced restart) Spark starts "
            "a replacement JVM beside it on the same 2 cores."
            if "to_first_step_s" in spare
            else "."
        )
        + _operator_settings(b10),
        "",
    ]


def _operator_settings(b10: dict) -> str:
    """The sentence comparing the in-job restart through Airflow with the script's ("" without those rounds)."""
    rounds = _airflow_rounds(b10)
    if not rounds:
        return ""
    through = statistics.median(r["in_job_s"] for r in rounds)
    script = statistics.median(r["in_job_s"] for r in b10["rounds"])
    retry_through = statistics.median(r["retry_s"] for r in rounds)
    retry_script = statistics.median(r["retry_s"] for r in b10["rounds"])
    return (
        f" Through Airflow the same in-job restart took {_s(through)} against the script's {_s(script)}, and the "
        f"retry {_s(retry_through)} against the script's {_s(retry_script)}, Airflow's part included: the "
        "operator's applications start their executor JVMs with the client JIT only and their Python daemon from "
        "compiled PySpark (the Spark settings the hooks give every application, `utils/spark_conf.py`), the "
        "script's application does not; probably the difference, not isolated."
    )


def b10_section(results: dict, standalone_run: bool = False) -> list[str]:
    """
    The B10 section, between :data:`B10_START` and :data:`B10_END`: the table, the spot simulation's timeline, method.

    :param results: the run's results dict.
    :param standalone_run: the section is written into a page from an earlier full run (``--only b10``).
    """
    b10 = results["b10"]
    heading = "## B10 a lost executor: restart within the try against an Airflow retry"
    out = section_opening(B10_START, heading, results, "b10", standalone_run)
    out += [
        "The training, cluster, checkpoint interval and kill of B9, on both paths in each round. "
        + (
            "Through a real Airflow deployment (the comparison #36 states): a task with `retries=1, retry_delay=0`, "
            "whose first try fails on the lost executor and whose retry resumes from the checkpoint, against a task "
            "with `max_restarts=1` whose driver restarts the barrier job within the try. And with client scripts, "
            "no Airflow: "
            if _airflow_rounds(b10)
            else ""
        )
        + "the job run again as soon as the first try failed (without Airflow's part: no scheduler, no new task "
        "process, no DAG file parsed again; but with a plain SparkSession's settings, not the operator's), against "
        "the same try restarting the barrier job itself "
        "(`max_restarts=1`). Goal: the in-job path reaches its first step after the kill in at most a quarter of the "
        "retry's time, losing at most one checkpoint interval.",
        "",
        *b10_table(results),
        "",
    ]
    if "error" in b10:
        return out + [B10_END]
    for note in results.get("notes", []):
        if note.startswith("B10"):
            out += [f"Time budget: {note}.", ""]
    out += where_the_time_goes(b10)
    spot = b10["spot"]
    start = spot["timeline"][0]["killed_at"]
    out += [
        f"Spot simulation: one try with `max_restarts={len(spot['timeline'])}`, rank 1's executor SIGKILLed "
        f"{len(spot['timeline'])} times, each in the step before a checkpoint is due; it succeeded in that try after "
        f"{spot['restarts']} restarts, {spot['total_steps']} steps trained for {b10['steps']} planned:",
        "",
        "| kill | at (s) | after step | the restart's cause | resumed from step | kill -> first step |",
        "|---|---|---|---|---|---|",
    ]
    for i, kill in enumerate(spot["timeline"], 1):
        clock = datetime.fromtimestamp(kill["killed_at"]).strftime("%H:%M:%S")
        out.append(
            f"| {i} | {kill['killed_at'] - start:.1f} ({clock}) | {kill['last_step']} | {kill['cause']} | "
            f"{kill['resumed_from']} | {_s(kill['to_first_step_s'])} |"
        )
    out += [
        "",
        f"Method: a standalone cluster of 2 workers x 2 cores (127.0.0.1); each try a client script (a SparkSession "
        f"of its own, `spark.executor.cores=1`: one executor per rank) running `HorovodRunner(np=2, "
        f"checkpoint_dir=...)` on {b10['steps']} steps of one allreduce and {b10['step_s']} s of work, "
        f"`save_checkpoint` every {b10['interval']} steps; rank 0 appends each step with its attempt and time to a "
        f"file. Once it shows step {b10['kill_at']}, the harness SIGKILLs the executor JVM whose task runs rank 1 "
        "(in its process tree, or forked for it by the job's fork server: `tests/standalone.holds_rank`). Retry "
        "path: B9's round (`benchmarks/lost_executor.py`); in-job path: the same script with "
        "`max_restarts` (`benchmarks/in_job_restart.py`); kill -> first step = the first step recorded after the kill "
        "minus the kill's time."
        + (
            " Through Airflow: `benchmarks/airflow_restart.py` starts a deployment (api-server, scheduler, "
            "dag-processor; LocalExecutor, SQLite: `tests/airflow_deployment.py`) against the same cluster and "
            "triggers the two DAGs of `benchmarks/dags/b10_restart.py` (the same training and kill, client deploy "
            "mode, the operator's own Spark settings); when Airflow recorded the failed try and started the retry are "
            "the tries' end and start dates in Airflow's REST API."
            if _airflow_rounds(b10)
            else ""
        ),
        B10_END,
    ]
    return out
