"""
The progress snapshot a job's driver keeps (``<artifact_dir>/progress.json``) and the one line the task log shows
for it (:func:`progress_line`), shared by the driver (which prints it in client mode and on a plain
``HorovodRunner``) and the Airflow side (which logs it in cluster mode from the snapshot, sync or deferred).

The snapshot: ``{"time", "started_at", "state" ("running" | "finished" | "failed"), "step", "total_steps", "epoch",
"percent", "steps_per_s", "eta_s", "metrics" (rank 0's last values), "ranks" ({"<rank>": {"step", "time"}}),
"slowest_rank", "resumed" (``{"step", "try_number", "saved_by", "location"}`` when rank 0 resumed from a checkpoint,
else ``None``), "phase" (what the job did last before the ranks reported: ``waiting for 2 task slots: ...``,
``starting 2 ranks``, then the ranks' own milestones, :func:`rank_phase`; ``None`` before that), "restarts" (the job's
restarts within the try, ``max_restarts``: ``[{"number", "of", "cause", "error", "at", "backoff_s", "step", "planned",
"failure", "ranks"}]``, :class:`~airflow_provider_horovod.runtime.driver.restarts.Restart`), "error" (a
failed job's headline, else ``None``)}``; times are Unix seconds, rates per second.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

PROGRESS_FILE = "progress.json"
"""The snapshot's name in the artifact directory."""
METRICS_FILE = "metrics.jsonl"
"""The history's name in the artifact directory: rank 0's records, one JSON object per line."""
MILESTONE_EVENT = "milestone"
"""The ``event`` of a record a rank's launcher sends when the rank reaches a milestone
(``{"event": "milestone", "rank", "milestone", "time"}``, ``milestone`` one of :data:`MILESTONES`)."""
MILESTONES = ("loaded", "init", "ready")
"""A rank's milestones in order: its function loaded and called, inside the launcher's init call (the rendezvous),
the init call returned with every rank (it joined). ``init`` and ``ready`` repeat for every init call."""


def json_records(lines: Iterable[str | bytes]) -> Iterator[dict[str, Any]]:
    """
    The JSON objects among ``lines`` (``metrics.jsonl``'s, or a rank's ``report()`` pipe), in order; blank lines,
    lines that do not decode (a partial last one) and JSON that is not an object are skipped.

    :param lines: text or bytes lines, with or without their newlines.
    """
    for line in lines:
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            yield record


def _duration(seconds: float) -> str:
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {seconds} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min"


def _value(number: Any) -> str:
    if number is None:
        return "nan"
    return f"{number:.4g}" if isinstance(number, float) else str(number)


def restart_line(restart: Mapping[str, Any]) -> str:
    """
    The line that says the job restarted within the try (``max_restarts``), e.g. ``restart 2/3: rank 1 killed by SIGKILL
    at step 12; starting again in 1 s`` (``starting again now`` without a back-off): what the driver prints, and a
    cluster-mode wait logs from the snapshot. A planned restart (the driver asked the attempt to stop at a checkpoint)
    says so instead of counting against ``max_restarts``: ``restart 2 (planned; not counted in max_restarts=1): rank 0
    stopped after saving checkpoint step 20: all np=2 task slots are free again; starting again now``.

    :param restart: one of the snapshot's ``restarts`` (``{"number", "of", "cause", "step", "backoff_s", "planned",
        ...}``).
    """
    backoff = float(restart.get("backoff_s") or 0)
    when = f"in {backoff:.0f} s" if backoff > 0 else "now"
    return f"{_restart_name(restart)}: {_cause_at_step(restart)}; starting again {when}"


def _restart_name(restart: Mapping[str, Any]) -> str:
    """
    ``restart 2/3``; ``restart 2 (planned; not counted in max_restarts=3)``; after a planned restart, a failure's
    restart with its place in the budget: ``restart 3 (2/3 of max_restarts)``.
    """
    number, of, failure = restart.get("number"), restart.get("of"), restart.get("failure")
    if restart.get("planned"):
        return f"restart {number} (planned; not counted in max_restarts={of})"
    if failure is not None and failure != number:
        return f"restart {number} ({failure}/{of} of max_restarts)"
    return f"restart {number}/{of}"


def _cause_at_step(restart: Mapping[str, Any]) -> str:
    """A restart's cause and the step its failed attempt reached, e.g. ``rank 1 killed by SIGKILL at step 12``."""
    step = restart.get("step")
    at_step = f" at step {step}" if step is not None and not restart.get("planned") else ""  # it names its checkpoint
    return f"{restart.get('cause')}{at_step}"


def restarts_summary(restarts: Sequence[Mapping[str, Any]]) -> str:
    """
    The job's restarts in one line, for the end of the task log: ``1 time(s) (max_restarts): rank 1 killed by SIGKILL
    at step 12``; planned restarts (at a checkpoint the driver asked for) are told apart, as ``max_restarts`` does not
    count them: ``2 time(s) (1 after a failure, of max_restarts; 1 planned): ...``.

    :param restarts: the snapshot's (or the job result's) ``restarts``, in order.
    """
    planned = sum(bool(r.get("planned")) for r in restarts)
    count = f"{len(restarts)} time(s) " + (
        f"({len(restarts) - planned} after a failure, of max_restarts; {planned} planned)"
        if planned
        else "(max_restarts)"
    )
    return f"{count}: " + "; ".join(_cause_at_step(r) for r in restarts)


def earlier_restart_line(restart: Mapping[str, Any]) -> str:
    """
    The line for a restart that came before the wait that logs it (a retry that reattached to the running job, a
    trigger run again), e.g. ``restart 1/3 happened before this wait began (at 10:42:07 UTC): rank 1 killed by SIGKILL
    at step 12``: told, not as if it were happening now.

    :param restart: one of the snapshot's ``restarts``, as for :func:`restart_line`.
    """
    when = restart.get("at")
    clock = (
        f" (at {datetime.datetime.fromtimestamp(when, datetime.UTC):%H:%M:%S} UTC)"
        if isinstance(when, (int, float))
        else ""
    )
    return f"{_restart_name(restart)} happened before this wait began{clock}: {_cause_at_step(restart)}"


def resume_line(resumed: Mapping[str, Any]) -> str:
    """
    The line that says a try resumed from a checkpoint, e.g. ``resuming from checkpoint step 20 (try 2), saved by try
    1, from /ckpt/step-000000000020.json`` (rank 0 prints it; the Airflow side logs it from ``progress.json``).

    :param resumed: ``{"step", "try_number", "saved_by", "location"}`` (the last three may be ``None``).
    """
    number, saved_by, where = resumed.get("try_number"), resumed.get("saved_by"), resumed.get("location")
    return (
        f"resuming from checkpoint step {resumed.get('step')}{f' (try {number})' if number is not None else ''}"
        f"{f', saved by try {saved_by}' if saved_by is not None else ''}{f', from {where}' if where else ''}"
    )


def progress_line(snapshot: Mapping[str, Any]) -> str | None:
    """
    The task log's line for a snapshot, e.g. ``step 1200/3000 (40%) 85 steps/s, ETA 21 s; loss 0.12 acc 0.93;
    slowest rank 1 at step 1180``; without ``total_steps``: rate and elapsed time.

    :param snapshot: a ``progress.json`` snapshot.
    :return: the line, or ``None`` when nothing was reported yet.
    """
    step, total = snapshot.get("step"), snapshot.get("total_steps")
    metrics = snapshot.get("metrics") or {}
    if step is None and not metrics and snapshot.get("epoch") is None:
        return None
    parts = []
    if step is not None:
        head = f"step {step}/{total}" if total else f"step {step}"
        if snapshot.get("percent") is not None:
            head += f" ({snapshot['percent']:.0f}%)"
        rate = snapshot.get("steps_per_s")
        if rate is not None:
            head += f" {rate:.3g} steps/s"
        if snapshot.get("eta_s") is not None and snapshot.get("state") == "running":
            head += f", ETA {_duration(snapshot['eta_s'])}"
        elif snapshot.get("started_at") is not None and snapshot.get("time") is not None:
            head += f", {_duration(snapshot['time'] - snapshot['started_at'])} elapsed"
        parts.append(head)
    if snapshot.get("epoch") is not None:
        parts.append(f"epoch {snapshot['epoch']}")
    if metrics:
        parts.append(" ".join(f"{name} {_value(value)}" for name, value in metrics.items()))
    slowest = snapshot.get("slowest_rank")
    if slowest is not None:
        at = (snapshot.get("ranks") or {}).get(str(slowest), {}).get("step")
        parts.append(f"slowest rank {slowest} at step {at}")
    return "; ".join(parts)


def rank_phase(milestones: Mapping[int, str], np: int, init_call: str) -> str:
    """
    What the ranks are doing before the first report, from each rank's latest milestone (:data:`MILESTONES`).

    :param milestones: ``{rank: milestone}`` of the ranks that reached one.
    :param np: the job's number of ranks.
    :param init_call: the launcher's init call, as messages name it (``hvd.init()``, ``init_process_group()``).
    :return: ``loading the training function: 1/2 ranks``, ``rendezvous: 1/2 ranks in hvd.init(), 0 joined``, or
        ``training: all 2 ranks joined hvd.init(), no report yet``.
    """
    joined = sum(1 for m in milestones.values() if m == "ready")
    rendezvous = sum(1 for m in milestones.values() if m in ("init", "ready"))
    if joined >= np:
        return f"training: all {np} ranks joined {init_call}, no report yet"
    if rendezvous:
        return f"rendezvous: {rendezvous}/{np} ranks in {init_call}, {joined} joined"
    return f"loading the training function: {len(milestones)}/{np} ranks"
