"""The partial-run page merge of ``benchmarks/pages_partial.py``: what an earlier "Rerun alone" line keeps."""

from __future__ import annotations

from benchmarks.pages_partial import merge

OLD = """| B7 DDP launch | ours | 2.0 s |
| B8 DDP throughput | ours | 8,000 samples/s |

Ratios are of medians.

Rerun alone: B7, B8 on 2026-12-02 05:06 UTC (full settings, 6.6 min; load); their rows. Time budget: B8: 2 of 3 rounds.

Rerun alone: B3 on 2026-12-01 10:00 UTC (full settings, 2.0 min; load); their rows."""

NEW = """| B8 DDP throughput | ours | 13,000 samples/s |

Ratios are of medians."""


def _results(*keys: str) -> dict:
    return {
        **{k: {"x": 1.0} for k in keys},
        "notes": [],
        "config": {"mode": "full"},
        "meta": {
            "date": "2026-12-02 17:10 UTC",
            "cores": 2,
            "total_seconds": 240,
            "load_start": [0.1],
            "load_end": [2.7],
        },
    }


def test_a_rerun_takes_its_benchmarks_out_of_earlier_rerun_lines():
    page = merge(OLD, NEW, _results("b8")).split("\n")
    assert "| B8 DDP throughput | ours | 13,000 samples/s |" in page and "| B7 DDP launch | ours | 2.0 s |" in page
    reruns = [ln for ln in page if ln.startswith("Rerun alone: ")]
    assert reruns[0].startswith("Rerun alone: B8 on 2026-12-02 17:10 UTC")
    # B7's rows still come from the 05:06 run; B8 and its time-budget note left that line
    assert reruns[1] == "Rerun alone: B7 on 2026-12-02 05:06 UTC (full settings, 6.6 min; load); their rows."
    assert reruns[2].startswith("Rerun alone: B3 on 2026-12-01")
    assert len(reruns) == 3


def test_a_rerun_of_all_an_earlier_lines_benchmarks_drops_that_line():
    page = merge(OLD, NEW, _results("b7", "b8"))
    assert [ln.split(" on ")[0] for ln in page.split("\n") if ln.startswith("Rerun alone: ")] == [
        "Rerun alone: B7, B8",
        "Rerun alone: B3",
    ]
    assert "05:06" not in page and "\n\n\n" not in page
