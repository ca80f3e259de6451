"""
A partial run's page (``--only b8``, ``--only b7,b8``): the rerun benchmarks' parts of ``docs/benchmarks.md``
replaced by this run's, the rest of the page (from an earlier full run) kept, and a line saying what was rerun when.

The parts of a benchmark ``Bn`` are found by the generator's own prefixes: its table rows (``| Bn ...``), its
target lines (``- Bn ...``), its line under "What is measured" (``- Bn (``) and its "Where the time goes: Bn"
section. A part the old page lacks (a benchmark added since) is put after the lines of its kind of the nearest
benchmark before it in the page's order (:data:`ORDER`), else after the last line of its kind.
"""

from __future__ import annotations

import re

ROW_KEYS = ("b1", "b2", "b3", "b4", "b7", "b8", "b13")
"""The benchmarks with rows in the main table (B5 has a section of its own: :func:`report.write_b5_section`)."""
NOTE_PREFIX = "Rerun alone: "
_BENCH = re.compile(r"[|-] (B\d+)\b")
ORDER = ("B1", "B2", "B3", "B7", "B8", "B13", "B4")
"""The benchmarks in the order of the page's table rows, target lines and "What is measured" lines
(:func:`benchmarks.rows.rows`, :func:`benchmarks.pages._method`)."""


def rerun_keys(results: dict) -> list[str]:
    """The row benchmarks this run measured."""
    return [k for k in ROW_KEYS if results.get(k) is not None]


def is_partial(results: dict) -> bool:
    """Some row benchmarks ran, not all (B5 or B9 alone is :func:`report.only_sections`' case)."""
    keys = rerun_keys(results)
    return bool(keys) and len(keys) < len(ROW_KEYS)


def _section(lines: list[str], start: int) -> int:
    """The index after the section that starts at ``lines[start]`` (the next ``## `` heading, or the end)."""
    end = start + 1
    while end < len(lines) and not lines[end].startswith("## "):
        end += 1
    return end


def _bench(line: str) -> str | None:
    """The benchmark a table row, target line or "What is measured" line is of (``B8``), or ``None``."""
    found = _BENCH.match(line)
    return found.group(1) if found else None


def _replace(old: list[str], new: list[str], match, anchor) -> list[str]:
    """
    ``old`` with its lines that ``match`` replaced by ``new``'s (at the first old one). Where ``old`` has none
    (a benchmark added since the page was written), they go after ``old``'s ``anchor`` lines of the nearest
    benchmark before theirs in :data:`ORDER`; else after the last line that ``anchor`` matches.
    """
    fresh = [ln for ln in new if match(ln)]
    at = [i for i, ln in enumerate(old) if match(ln)]
    if at:
        kept = [ln for i, ln in enumerate(old) if i not in set(at)]
        return kept[: at[0]] + fresh + kept[at[0] :]
    anchors = [i for i, ln in enumerate(old) if anchor(ln)]
    pos = anchors[-1] + 1 if anchors else len(old)
    key = _bench(fresh[0]) if fresh else None
    for before in reversed(ORDER[: ORDER.index(key)] if key in ORDER else ()):
        same = [i for i in anchors if _bench(old[i]) == before]
        if same:
            pos = same[-1] + 1
            break
    return old[:pos] + fresh + old[pos:]


def _without(line: str, keys: set[str]) -> str | None:
    """
    An earlier "Rerun alone" ``line`` without the benchmarks in ``keys`` (upper case: ``B8``) and their time-budget
    notes; ``None`` when none of its benchmarks is left.
    """
    named, rest = line[len(NOTE_PREFIX) :].split(" on ", 1)
    left = [k for k in named.split(", ") if k not in keys]
    if not left:
        return None
    head, *budgets = rest.split(" Time budget: ")
    budgets = [b for b in budgets if b.split(":", 1)[0] not in keys]
    return f"{NOTE_PREFIX}{', '.join(left)} on {head}" + "".join(f" Time budget: {b}" for b in budgets)


def merge(old_page: str, new_page: str, results: dict) -> str:
    """
    ``old_page`` with the parts of every benchmark in :func:`rerun_keys` taken from ``new_page`` (the whole
    page this run would write on its own), and one line naming the rerun, its date and its load.
    """
    old, new = old_page.split("\n"), new_page.split("\n")
    for key in rerun_keys(results):
        tag = key.upper() + " "
        old = _replace(old, new, lambda ln, tag=tag: ln.startswith(f"| {tag}"), lambda ln: ln.startswith("| B"))
        old = _replace(
            old,
            new,
            lambda ln, tag=tag: ln.startswith(f"- {tag}") and ": **" in ln,
            lambda ln: ln.startswith("- B") and ": **" in ln,
        )
        old = _replace(
            old,
            new,
            lambda ln, key=key: ln.startswith(f"- {key.upper()} ("),
            lambda ln: ln.startswith("- B") and " (" in ln and ": **" not in ln,
        )
        heading = f"## Where the time goes: {key.upper()}"
        starts = [i for i, ln in enumerate(new) if ln.startswith(heading)]
        if starts:
            fresh = new[starts[0] : _section(new, starts[0])]
            at = [i for i, ln in enumerate(old) if ln.startswith(heading)]
            if at:
                old = old[: at[0]] + fresh + old[_section(old, at[0]) :]
    for heading in ("## How to rerun",):  # the generator's own text, not a run's numbers
        at_new = [i for i, ln in enumerate(new) if ln.startswith(heading)]
        at_old = [i for i, ln in enumerate(old) if ln.startswith(heading)]
        if at_new and at_old:
            old = old[: at_old[0]] + new[at_new[0] : _section(new, at_new[0])] + old[_section(old, at_old[0]) :]
    meta = results["meta"]
    loads = " / ".join(f"{x[0]:.1f}" for x in (meta.get("load_start"), meta.get("load_end")) if x)
    note = (
        f"{NOTE_PREFIX}{', '.join(k.upper() for k in rerun_keys(results))} on {meta['date']} "
        f"({results['config']['mode']} settings, {meta.get('total_seconds', 0) / 60:.1f} min; 1-minute load "
        f"average at its start / end {loads} on {meta['cores']} cores); their rows, targets and sections above "
        "and below are from that run, the rest from the run named at the top."
        + "".join(f" Time budget: {n}." for n in results.get("notes", []))
    )
    rerun = {k.upper() for k in rerun_keys(results)}
    for i in [i for i, ln in enumerate(old) if ln.startswith(NOTE_PREFIX)][::-1]:
        kept = _without(old[i], rerun)  # an earlier rerun's line keeps only the benchmarks this run did not redo
        if kept is None:
            del old[i - 1 if i and not old[i - 1] else i : i + 1]
        else:
            old[i] = kept
    results_at = next((i for i, ln in enumerate(old) if ln.startswith("Ratios are of medians")), None)
    if results_at is not None:
        old = old[: results_at + 1] + ["", note] + old[results_at + 1 :]
    return "\n".join(old)
