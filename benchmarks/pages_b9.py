"""
B9's part of ``docs/benchmarks.md``: its section between :data:`B9_START` and :data:`B9_END` (which
``python -m benchmarks --only b9`` rewrites alone).
"""

from __future__ import annotations

import statistics

from benchmarks.pages_b5 import section_opening
from benchmarks.rows import seconds as _s

B9_START = "<!-- B9 section: written by benchmarks (python -m benchmarks --only b9 rewrites it alone) -->"
B9_END = "<!-- end of the B9 section -->"


def b9_table(results: dict) -> list[str]:
    """
    B9's Markdown table: work lost per fault against the goal, and the times from the kill.

    :param results: the run's results dict.
    """
    b9 = results["b9"]
    lines = ["| Measure | Median | Rounds | Goal | Verdict |", "|---|---|---|---|---|"]
    if "error" in b9:
        return lines + [f"| (whole benchmark) | could not run: {b9['error']} |  |  |  |"]
    rounds = b9["rounds"]
    few = results.get("config", {}).get("min_reps", 2) < 2 or len(rounds) < 2
    worst = b9["max_lost_intervals"]
    verdict = ("met" if worst <= b9["goal"] else "missed") + (" (quick run: indicative)" if few else "")

    def row(label: str, key: str, fmt, goal: str = "", judged: str = "") -> str:
        values = [r[key] for r in rounds]
        return (
            f"| {label} | {fmt(statistics.median(values))} | {', '.join(fmt(v) for v in values)} | {goal} | {judged} |"
        )

    return lines + [
        row(
            "work lost per fault (steps trained again / checkpoint interval)",
            "lost_intervals",
            lambda v: f"{v:.2f}",
            f"<= {b9['goal']:.1f} (every round)",
            verdict,
        ),
        row("kill -> the failed try's `HorovodRunner.run` raises", "to_failure_s", _s),
        row(
            "the failed try -> the retry's first step (new SparkSession, executors, ranks, checkpoint load)",
            "retry_start_s",
            _s,
        ),
        row("kill -> the retry's first step", "to_retry_step_s", _s),
    ]


def b9_section(results: dict, standalone_run: bool = False) -> list[str]:
    """
    The B9 section, between :data:`B9_START` and :data:`B9_END`: table, the failed try's headline, method.

    :param results: the run's results dict.
    :param standalone_run: the section is written into a page from an earlier full run (``--only b9``): it then
        states its own date, machine load and versions.
    """
    b9 = results["b9"]
    out = section_opening(B9_START, "## B9 work lost per fault", results, "b9", standalone_run)
    out += [
        "An executor JVM holding one rank of an np=2 training is SIGKILLed in the last step before a checkpoint "
        "is due (the worst place; when the harness is slow the kill lands just after that checkpoint and the round "
        "loses nothing), and the job is run again with the same checkpoint directory, as an Airflow retry "
        "does. Goal: at most one checkpoint interval of training lost per fault.",
        "",
        *b9_table(results),
        "",
    ]
    if "error" in b9:
        return out + [B9_END]
    for note in results.get("notes", []):
        if note.startswith("B9"):
            out += [f"Time budget: {note}.", ""]
    first = b9["rounds"][0]
    out += [
        f"The failed try's headline (round 1): `{first['headline']}`",
        "",
        f"Method: a standalone cluster of 2 workers x 2 cores (127.0.0.1), each try a client script (a "
        f"SparkSession of its own, `spark.executor.cores=1`: one executor per rank) running "
        f"`HorovodRunner(np=2, checkpoint_dir=..., try_number=n)` on {b9['steps']} steps of one allreduce and "
        f"{b9['step_s']} s of work, `save_checkpoint` every {b9['interval']} steps; rank 0 appends each step it "
        f"trains, with its time, to a file. Once that file shows step {b9['kill_at']} (so the kill lands in "
        f"step {b9['kill_at'] + 1}, the last before a checkpoint is due), the harness SIGKILLs the executor whose "
        "process tree holds rank 1 (psutil: `CoarseGrainedExecutorBackend` of the try's "
        "application). The retry starts as soon as the first try has failed (an Airflow retry with "
        "`retry_delay=0`); work lost = the first try's last step - the step the retry resumed from.",
        B9_END,
    ]
    return out
