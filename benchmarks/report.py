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

from benchmarks.rows import markdown_row, rows

RERUN = (
    ".venv/bin/python -m benchmarks            # full run (< 15 min on 2 cores, plus ~6 min for B7+B8, ~9 for "
    "B5, ~4 for B9 and ~6 for B13)\n"
    ".venv/bin/python -m benchmarks --quick    # ~7-10 min, fewer repetitions, shorter B4 runs\n"
    ".venv/bin/python -m benchmarks --only b5  # B5 alone: rewrites its section of this page\n"
    ".venv/bin/python -m benchmarks --only b9  # B9 alone: rewrites its section of this page\n"
    ".venv/bin/python -m benchmarks --only b11  # B11 alone: rewrites its section, and docs/scale_launch.png\n"
    ".venv/bin/python -m benchmarks --only b12  # B12 alone (simulated ranks, ~2 min): rewrites its section\n"
    ".venv/bin/python -m benchmarks --only b8  # some of B1-B4/B7/B8/B13: rewrites their rows and sections only"
)


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
    cpu = (
        next(
            (
                ln.split(":", 1)[1].strip()
                for ln in Path("/proc/cpuinfo").read_text().splitlines()
                if ln.startswith("model name")
            ),
            platform.processor() or "?",
        )
        if Path("/proc/cpuinfo").exists()
        else "?"
    )
    return {
        "load_start": load_average(),
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "cores": os.cpu_count(),
        "cpu": cpu,
        "memory_gib": psutil.virtual_memory().total / 2**30,
        "os": platform.platform(),
        "python": platform.python_version(),
        "java": java,
        "versions": {
            d: version(d)
            for d in (
                "airflow-provider-horovod",
                "torch",
                "horovod",
                "pyspark",
                "apache-airflow",
                "apache-airflow-providers-apache-spark",
                "cloudpickle",
                "numpy",
                "scikit-learn",
                "psutil",
                "matplotlib",
            )
        },
    }


COLUMNS = [
    ("bench", "Benchmark"),
    ("contender", "Contender"),
    ("median", "Median"),
    ("samples", "Samples"),
    ("ratio", "Ratio"),
    ("target", "Target"),
    ("verdict", "Verdict"),
]


def console_table(results: dict) -> str:
    """The table as fixed-width text (B5, which has a table of its own on the page, follows as its lines)."""
    from benchmarks.pages_b5 import b5_table

    table = rows(results)
    widths = {k: max(len(h), *(len(r[k]) for r in table)) for k, h in COLUMNS}
    line = " | ".join(h.ljust(widths[k]) for k, h in COLUMNS)
    out = [line, "-" * len(line)]
    out += [" | ".join(r[k].ljust(widths[k]) for k, _ in COLUMNS) for r in table]
    if results.get("b5") is not None:
        out += ["", "B5 queueing on a busy cluster:", *b5_table(results)]
    if results.get("b9") is not None:
        from benchmarks.pages_b9 import b9_table

        out += ["", "B9 work lost per fault:", *b9_table(results)]
    if results.get("b10") is not None:
        from benchmarks.pages_b10 import b10_table

        out += ["", "B10 a lost executor, restart within the try against an Airflow retry:", *b10_table(results)]
    if results.get("b11") is not None:
        from benchmarks.pages_b11 import b11_model_table, b11_table, model_heading

        out += ["", "B11 launch and run cost against the number of ranks:", *b11_table(results)]
        model = b11_model_table(results)
        if model:
            heading = model_heading(results["b11"]["model"])
            out += ["", f"B11 {heading} (informational, no goal):", *model]
    if results.get("b12") is not None:
        from benchmarks.pages_b12 import b12_table

        out += ["", "B12 the driver side at up to 1,024 simulated ranks:", *b12_table(results)]
    return "\n".join(out)


def markdown_table(results: dict) -> str:
    table = rows(results)
    out = ["| " + " | ".join(h for _, h in COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    out += [markdown_row([r[k] for k, _ in COLUMNS]) for r in table]
    return "\n".join(out)


_SECTION_ONLY = ("b5", "b9", "b10", "b11", "b12")
"""Benchmarks with a section of their own, which a run of them alone (``--only b5,b9``) rewrites in place."""


def only_sections(results: dict) -> list[str]:
    """The benchmarks of a run of only :data:`_SECTION_ONLY` ones (then only their sections are rewritten), or []."""
    ran = [
        k
        for k in ("b1", "b2", "b3", "b4", "b5", "b7", "b8", "b9", "b10", "b11", "b12", "b13")
        if results.get(k) is not None
    ]
    return ran if ran and set(ran) <= set(_SECTION_ONLY) else []


def write_results(results: dict, docs: Path) -> tuple[Path, str]:
    """
    :func:`write`; for a run of B5 and/or B9 alone :func:`write_section` for each, for a run of some of the others
    :func:`write_partial` (the rest of the page stays as it is). When B11 ran, its chart goes to
    ``docs/scale_launch.png`` (:func:`benchmarks.pages_b11.b11_chart`); the note returned says so.
    """
    from benchmarks import pages_partial

    sections = only_sections(results)
    if sections:
        for name in sections:
            md = write_section(results, docs, name)
        note = f"unchanged ({', '.join(s.upper() for s in sections)} only)"
    elif pages_partial.is_partial(results) and (docs / "benchmarks.md").exists():
        md, note = write_partial(results, docs), "unchanged (partial run)"
    else:
        md, note = write(results, docs)
    return md, note + _b11_chart(results, docs)


def _b11_chart(results: dict, docs: Path) -> str:
    """B11's chart, ``docs/scale_launch.png``, when B11 ran: a note on it to add to the page chart's; else ``""``."""
    if results.get("b11") is None:
        return ""
    from benchmarks.pages_b11 import b11_chart

    docs.mkdir(exist_ok=True)
    path = docs / "scale_launch.png"
    return f"; B11 chart {path}: {b11_chart(results, path)}"


def write_partial(results: dict, docs: Path) -> Path:
    """The page with the rerun benchmarks' rows and sections replaced (:func:`pages_partial.merge`)."""
    from benchmarks import pages, pages_partial

    md = docs / "benchmarks.md"
    new = pages.page(results, markdown_table(results), None, "unchanged", RERUN)
    md.write_text(pages_partial.merge(md.read_text(), new, results))
    return md


def write_b5_section(results: dict, docs: Path) -> Path:
    """:func:`write_section` of B5."""
    return write_section(results, docs, "b5")


def write_section(results: dict, docs: Path, name: str) -> Path:
    """
    Replace the section of benchmark ``name`` (one of :data:`_SECTION_ONLY`) of ``docs/benchmarks.md`` (between its
    markers) with this run's, or insert it before "## What is measured"; the rest of the page, from an earlier run, is
    kept.

    :raises FileNotFoundError: there is no page yet (run the full harness once).
    """
    from benchmarks import pages_b5, pages_b9, pages_b10, pages_b11, pages_b12

    start_mark, end_mark, lines = {
        "b5": (pages_b5.B5_START, pages_b5.B5_END, pages_b5.b5_section),
        "b9": (pages_b9.B9_START, pages_b9.B9_END, pages_b9.b9_section),
        "b10": (pages_b10.B10_START, pages_b10.B10_END, pages_b10.b10_section),
        "b11": (pages_b11.B11_START, pages_b11.B11_END, pages_b11.b11_section),
        "b12": (pages_b12.B12_START, pages_b12.B12_END, pages_b12.b12_section),
    }[name]
    md = docs / "benchmarks.md"
    text = md.read_text()
    section = "\n".join(lines(results, standalone_run=True))
    start, end = text.find(start_mark), text.find(end_mark)
    if start >= 0 and end > start:
        text = text[:start] + section + text[end + len(end_mark) :]
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
    md.write_text(pages.page(results, markdown_table(results), png.name if note == "written" else None, note, RERUN))
    return md, note
