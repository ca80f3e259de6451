"""
B12's part of ``docs/benchmarks.md``: its section between :data:`B12_START` and :data:`B12_END` (which
``python -m benchmarks --only b12`` rewrites alone).
"""

from __future__ import annotations

import statistics

from benchmarks.pages_b5 import section_opening
from benchmarks.rows import mib

B12_START = "<!-- B12 section: written by benchmarks (python -m benchmarks --only b12 rewrites it alone) -->"
B12_END = "<!-- end of the B12 section -->"


def _lost(r: dict) -> str:
    """What did not arrive (none expected): rank 0's records, ranks' last steps, lines."""
    gaps = []
    if r["rank0_records_kept"] != r["rank0_records_sent"]:
        gaps.append(f"rank 0 records {r['rank0_records_kept']}/{r['rank0_records_sent']}")
    if r["ranks_last_step_right"] != r["size"]:
        gaps.append(f"last step right for {r['ranks_last_step_right']}/{r['size']} ranks")
    if r["lines_received"] != r["lines_sent"]:
        gaps.append(f"lines {r['lines_received']}/{r['lines_sent']}")
    if r["silent_tasks"]:
        gaps.append(f"{len(r['silent_tasks'])} tasks taken for silent")
    return "; ".join(gaps) or "none"


def b12_table(results: dict) -> list[str]:
    """
    B12's Markdown table: per simulated size, the driver's cores, RSS and threads, the progress line's lag, what was
    lost, the files, each with its goal's verdict.

    :param results: the run's results dict.
    """
    b12 = results["b12"]
    lines = [
        "| Ranks | Driver CPU (cores) | Driver peak RSS | Driver threads | Progress line lag, median / max | Lost | "
        "`progress.json` | Verdict |",
        "|---|---|---|---|---|---|---|---|",
    ]
    if "error" in b12:
        return lines + [f"| (whole benchmark) | could not run: {b12['error']} |  |  |  |  |  |  |"]
    for size, r in sorted(b12["sizes"].items()):
        cores, lag = r["driver_cores"], r["max_lag_s"]
        ok = (
            cores is not None
            and cores <= b12["cores_goal"]
            and lag is not None
            and lag <= b12["lag_goal_s"]
            and _lost(r) == "none"
        )
        median_lag = f"{statistics.median(r['lags_s']):.2f} s" if r["lags_s"] else "-"
        lines.append(
            f"| {size:,} | {'-' if cores is None else f'{cores:.2f}'} | {mib(r['driver_peak_rss'])} | "
            f"{r['driver_threads']:,} | {median_lag} / {'-' if lag is None else f'{lag:.2f} s'} | {_lost(r)} | "
            f"{r['files'].get('progress.json', 0) / 1024:,.0f} KiB | {'met' if ok else 'missed'} |"
        )
    return lines


def rendezvous_lines(b12: dict) -> list[str]:
    """The rendezvous store's measured and extrapolated seconds, as a sentence each."""
    measured = b12.get("rendezvous") or []
    if not measured:
        return []
    parts = ", ".join(
        f"{m['size']} ranks {m['seconds']:.2f} s ({m['requests']:,} requests, {m['requests_per_s']:,.0f}/s)"
        for m in measured
    )
    out = [
        f"Horovod's rendezvous store (task 0's, Horovod's Python HTTP server with this project's listen backlog) under "
        f"Gloo's full-mesh requests (each rank: a PUT of its addresses, then for every peer a GET to wait for its key "
        f'and a GET to read it; a new connection each; then its "done" report), measured: {parts}.'
        + ("" if all(m.get("all_done", True) for m in measured) else " Task 0 did NOT learn of every rank's exit.")
    ]
    slow = b12.get("rendezvous_backlog_5") or []
    if slow:
        ours = {m["size"]: m["seconds"] for m in measured}
        out.append(
            "The same requests against a store with Horovod's own listen backlog of 5 (before this project's): "
            + ", ".join(
                f"{m['size']} ranks {m['seconds']:.2f} s (against {ours[m['size']]:.2f} s"
                + (f"; {m['resets']:,} connections reset and tried again" if m.get("resets") else "")
                + ")"
                for m in slow
                if m["size"] in ours
            )
            + "."
        )
    extrapolated = b12.get("rendezvous_extrapolated_s") or {}
    if extrapolated:
        out.append(
            "Extrapolated at the largest size's rate (N (1 + 2 (N - 1)) requests; the bytes, N^3, and the local and "
            "cross meshes not counted, so a floor): "
            + ", ".join(
                f"{int(n):,} ranks {s:,.0f} s" for n, s in sorted(extrapolated.items(), key=lambda kv: int(kv[0]))
            )
            + "."
        )
    return out


def b12_section(results: dict, standalone_run: bool = False) -> list[str]:
    """
    B12's section: what was simulated, the table, the rendezvous store, the load.

    :param results: the run's results dict.
    :param standalone_run: the run measured B12 alone (``--only b12``): say when and where.
    """
    b12 = results["b12"]
    heading = "## B12 the driver side at up to 1,024 ranks, simulated"
    out = section_opening(B12_START, heading, results, "b12", standalone_run)
    if "error" in b12:
        return out + b12_table(results) + ["", B12_END]
    out += [
        f"Stand-in ranks ({b12['processes']} processes holding every rank's connection, no framework imported) speak "
        f"the real protocol through the real `LogClient` to the real driver-side code in the benchmark's process "
        f"(`LogServer`, `MetricsCollector` writing `metrics.jsonl` and `progress.json` to a local directory, "
        f"`HeartbeatWatch`): all connect at once, send their milestones, a heartbeat every 2 s, "
        f"{b12['records_per_s']:g} `report()` records a second (the most a rank sends) and {b12['lines_per_s']:g} "
        f'line of output a second each (`driver_log_verbosity="all"`), for '
        f"{next(iter(b12['sizes'].values()))['seconds']:.0f} s per size. Driver CPU is this process's, every thread, "
        f"over the steady window (goal <= {b12['cores_goal']:g} core); a progress line's lag is how far it is behind "
        f"when written: the time since rank 0 sent the first step it does not show yet, 0 when it shows the newest "
        f"(goal <= {b12['lag_goal_s']:g} s); nothing may be lost "
        f"beyond the documented sampling (every rank 0 record in `metrics.jsonl`, every rank's last step in "
        f"`progress.json`, every line in the task log, no task taken for silent).",
        "",
        *b12_table(results),
        "",
        *rendezvous_lines(b12),
        "",
        f"Load average (1, 5, 15 min) at the start {tuple(round(x, 2) for x in b12['load_start'])}, at the end "
        f"{tuple(round(x, 2) for x in b12['load_end'])}.",
        "",
        B12_END,
    ]
    return out
