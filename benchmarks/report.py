"""
The report: environment facts, the results table (console and Markdown), breakdowns, and the PNG chart.

Every number printed here comes from the ``results`` dict built by :mod:`benchmarks.__main__` in the same run.
"""

from __future__ import annotations

import datetime as dt
import importlib.metadata
import os
import platform
import subprocess
from pathlib import Path

B1_TARGET, B2_TARGET, B3_TARGET = 0.5, 1.15, 0.98
RERUN = ".venv/bin/python -m benchmarks            # full run (< 15 min on 2 cores, plus up to ~9 min for B5)\n" \
        ".venv/bin/python -m benchmarks --quick    # ~5-8 min, fewer repetitions, shorter B4 runs\n" \
        ".venv/bin/python -m benchmarks --only b5  # B5 alone: rewrites its section of this page"


def load_average() -> list[float] | None:
    """The 1/5/15-minute load averages, or ``None`` where the OS has none."""
    try:
        return [round(v, 2) for v in os.getloadavg()]
    except OSError:
        return None


def environment() -> dict:
    """Machine, versions and date of this run."""
    import psutil

    def version(dist: str) -> str:
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            return "not installed"

    try:
        java = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=30).stderr.splitlines()[0]
    except Exception as err:
        java = f"unknown ({err})"
    cpu = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                if ln.startswith("model name")), platform.processor() or "?") if Path("/proc/cpuinfo").exists() else "?"
    return {
        "load_start": load_average(),
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "cores": os.cpu_count(), "cpu": cpu, "memory_gib": psutil.virtual_memory().total / 2**30,
        "os": platform.platform(), "python": platform.python_version(), "java": java,
        "versions": {d: version(d) for d in ("airflow-provider-horovod", "torch", "horovod", "pyspark",
                                             "apache-airflow", "apache-airflow-providers-apache-spark",
                                             "cloudpickle", "numpy", "scikit-learn", "psutil", "matplotlib")},
    }


def _fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "s":
        return f"{value:.2f} s"
    if unit == "samples/s":
        return f"{value:,.0f} samples/s"
    if unit == "MiB":
        return f"{value / 2**20:,.0f} MiB"
    return f"{value:.3g} {unit}"


def _samples(series, unit: str) -> str:
    if unit == "samples/s":
        return ", ".join(f"{v:,.0f}" for v in series.samples)
    return ", ".join(f"{v:.2f}" for v in series.samples)


def _verdict(ratio: float | None, target: float, at_most: bool) -> str:
    if ratio is None:
        return "not measured"
    ok = ratio <= target if at_most else ratio >= target
    return "met" if ok else "missed"


def rows(results: dict) -> list[dict]:
    """Table rows: benchmark, contender, median, samples, ratio, target, verdict."""
    out: list[dict] = []

    few = results.get("config", {}).get("min_reps", 2) < 2  # --quick: one round may be all there is

    def add(bench: str, contender: str, value: str, samples: str = "", ratio: str = "", target: str = "",
            verdict: str = "") -> None:
        if few and verdict in ("met", "missed"):
            verdict += " (quick run: indicative)"
        out.append({"bench": bench, "contender": contender, "median": value, "samples": samples, "ratio": ratio,
                    "target": target, "verdict": verdict})

    def add_error(bench: str, key: str) -> bool:
        section = results.get(key)
        if section is None:
            add(bench, "(not run)", "skipped with --only")
            return True
        if isinstance(section, dict) and "error" in section:
            add(bench, "(whole benchmark)", f"could not run: {section['error']}")
            return True
        return False

    if not add_error("B1 launch", "b1"):
        b1 = results["b1"]
        ours = b1["ours"].median
        add("B1 launch", "ours: HorovodRunner(np=2).run", b1["ours"].reason or _fmt(ours, "s"),
            _samples(b1["ours"], "s"))
        for name in ("horovod.spark.run", "TorchDistributor"):
            s = b1[name]
            ratio = ours / s.median if ours and s.median else None
            add("B1 launch", name, s.reason or _fmt(s.median, "s"), _samples(s, "s"),
                f"ours/this = {ratio:.3f}x" if ratio else "", f"<= {B1_TARGET}x",
                _verdict(ratio, B1_TARGET, True))
        parts = [b1["floor: fresh import"], b1["floor: empty barrier job"]]
        for name, s in zip(("floor: fresh import torch+horovod.torch", "floor: empty barrier job"), parts):
            add("B1 launch", name, s.reason or _fmt(s.median, "s"), _samples(s, "s"))
        if all(p.median is not None for p in parts):
            floor = sum(p.median for p in parts)
            add("B1 launch", "floor total (sum of medians)", _fmt(floor, "s"), "",
                f"ours/floor = {ours / floor:.2f}x" if ours else "")

    if not add_error("B2 operator", "b2"):
        series = results["b2"]["series"]
        op, hand = series["airflow dags test + HorovodRunnerOperator"], series["spark-submit by hand"]
        ratio = op.median / hand.median if op.median and hand.median else None
        add("B2 operator", "airflow dags test + HorovodRunnerOperator", op.reason or _fmt(op.median, "s"),
            _samples(op, "s"), f"operator/hand = {ratio:.3f}x" if ratio else "", f"<= {B2_TARGET}x",
            _verdict(ratio, B2_TARGET, True))
        add("B2 operator", "spark-submit by hand (same Spark confs)", hand.reason or _fmt(hand.median, "s"),
            _samples(hand, "s"))
        noop = series["airflow dags test of a no-op task"]
        add("B2 operator", "reference: airflow dags test of a no-op @task", noop.reason or _fmt(noop.median, "s"),
            _samples(noop, "s"))
        if op.median and hand.median and noop.median:
            floor = (noop.median + hand.median) / hand.median
            add("B2 operator", "estimate for a zero-cost operator (no-op task + hand spark-submit)",
                _fmt(noop.median + hand.median, "s"), "", f"(no-op + hand)/hand = {floor:.3f}x")
        execute = results["b2"].get("execute")
        if execute is not None and execute.median and hand.median:
            net = execute.median / hand.median
            add("B2 operator", "net of Airflow's fixed cost: the operator task's span (task started -> ended, "
                "same runs)", _fmt(execute.median, "s"), _samples(execute, "s"),
                f"task/hand = {net:.3f}x", f"<= {B2_TARGET}x", _verdict(net, B2_TARGET, True))

    if not add_error("B3 throughput", "b3"):
        b3 = results["b3"]
        ours, theirs, one = b3["ours np=2"], b3["horovod.spark.run np=2"], b3["ours np=1"]
        add("B3 throughput", "ours np=2", ours.reason or _fmt(ours.median, "samples/s"), _samples(ours, "samples/s"))
        ratio = ours.median / theirs.median if ours.median and theirs.median else None
        add("B3 throughput", "horovod.spark.run np=2", theirs.reason or _fmt(theirs.median, "samples/s"),
            _samples(theirs, "samples/s"), f"ours/this = {ratio:.3f}x" if ratio else "", f">= {B3_TARGET}x",
            _verdict(ratio, B3_TARGET, False))
        scale = ours.median / one.median if ours.median and one.median else None
        add("B3 throughput", "ours np=1", one.reason or _fmt(one.median, "samples/s"), _samples(one, "samples/s"),
            f"np2/np1 = {scale:.2f}x" if scale else "")

    if not add_error("B4 memory", "b4"):
        b4 = results["b4"]
        peak = b4["peak_bytes"]
        label = f"sync, ~{b4['train_seconds']:.0f} s training"
        add("B4 memory", f"{label}: Airflow task process peak RSS", _fmt(peak["airflow"], "MiB"),
            f"{b4['samples']} samples")
        add("B4 memory", f"{label}: spark-submit JVM peak RSS", _fmt(peak["jvm"], "MiB"))
        add("B4 memory", f"{label}: Spark Python workers + ranks peak RSS (context)", _fmt(peak["spark_python"], "MiB"))
    if results.get("b4_cluster") is not None and not add_error("B4 deferral", "b4_cluster"):
        b4c = results["b4_cluster"]
        for mode, label in (("sync", "cluster mode, sync"), ("deferred", "cluster mode, deferrable")):
            run = b4c[mode]
            label = f"{label}, ~{b4c['train_seconds']:.0f} s training"
            if not run["phases"]:
                add("B4 deferral", label, "the log lacks the expected steps: "
                    + ("the task did not defer" if mode == "deferred" else "phases unknown"))
                continue
            add("B4 deferral", f"{label}: worker held (task code running)",
                f"{run['held_seconds']:.2f} s of {run['wall_seconds']:.2f} s", "",
                f"held/wall = {run['held_seconds'] / run['wall_seconds']:.2f}")
            if mode == "deferred":
                add("B4 deferral", f"{label}: trigger waits for the driver, no task code running (worker free)",
                    f"{run['window_seconds']:.2f} s", "", f"free/wall = {run['window_seconds'] / run['wall_seconds']:.2f}")
            what = "while the trigger waits" if mode == "deferred" else "while execute() polls"
            add("B4 deferral", f"{label}: processes below the Airflow process {what}",
                "-" if run["max_children"] is None else str(run["max_children"]), f"{run['window_samples']} samples")
            add("B4 deferral", f"{label}: Airflow process peak RSS {what}", _fmt(run["peak_rss"], "MiB"))
    return out


COLUMNS = [("bench", "Benchmark"), ("contender", "Contender"), ("median", "Median"), ("samples", "Samples"),
           ("ratio", "Ratio"), ("target", "Target"), ("verdict", "Verdict")]


def console_table(results: dict) -> str:
    """The table as fixed-width text (B5, which has a table of its own on the page, follows as its lines)."""
    from benchmarks.pages import b5_table

    table = rows(results)
    widths = {k: max(len(h), *(len(r[k]) for r in table)) for k, h in COLUMNS}
    line = " | ".join(h.ljust(widths[k]) for k, h in COLUMNS)
    out = [line, "-" * len(line)]
    out += [" | ".join(r[k].ljust(widths[k]) for k, _ in COLUMNS) for r in table]
    if results.get("b5") is not None:
        out += ["", "B5 queueing on a busy cluster:", *b5_table(results)]
    return "\n".join(out)


def markdown_table(results: dict) -> str:
    table = rows(results)
    out = ["| " + " | ".join(h for _, h in COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    out += ["| " + " | ".join(r[k].replace("|", "\\|") for k, _ in COLUMNS) + " |" for r in table]
    return "\n".join(out)


def only_b5(results: dict) -> bool:
    """Whether ``results`` hold B5 alone (``--only b5``): then only the page's B5 section is rewritten."""
    return results.get("b5") is not None and all(results.get(k) is None for k in ("b1", "b2", "b3", "b4"))


def write_results(results: dict, docs: Path) -> tuple[Path, str]:
    """:func:`write`, or for a B5-only run :func:`write_b5_section` (the rest of the page stays as it is)."""
    if only_b5(results):
        return write_b5_section(results, docs), "unchanged (B5 only)"
    return write(results, docs)


def write_b5_section(results: dict, docs: Path) -> Path:
    """
    Replace the B5 section of ``docs/benchmarks.md`` (between its markers) with this run's, or insert it before
    "## What is measured"; the rest of the page, from an earlier full run, is kept.

    :raises FileNotFoundError: there is no page yet (run the full harness once).
    """
    from benchmarks import pages

    md = docs / "benchmarks.md"
    text = md.read_text()
    section = "\n".join(pages.b5_section(results, standalone_run=True))
    start, end = text.find(pages.B5_START), text.find(pages.B5_END)
    if start >= 0 and end > start:
        text = text[:start] + section + text[end + len(pages.B5_END):]
    else:
        at = text.find("## What is measured")
        at = at if at >= 0 else len(text)
        text = text[:at] + section + "\n\n" + text[at:]
    md.write_text(text)
    return md


def write(results: dict, docs: Path) -> tuple[Path, str]:
    """Write ``docs/benchmarks.md`` and ``docs/benchmarks.png``; returns the page's path and a note on the chart."""
    from benchmarks import chart, pages

    docs.mkdir(exist_ok=True)
    png = docs / "benchmarks.png"
    note = chart.draw(results, png)
    md = docs / "benchmarks.md"
    md.write_text(pages.page(results, markdown_table(results), png.name if note == "written" else None, note,
                             RERUN))
    return md, note

