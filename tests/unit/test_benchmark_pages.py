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


def test_the_b10_section_judges_the_ratio_the_work_lost_and_the_spot_run():
    from benchmarks.pages_b10 import B10_END, B10_START, b10_section

    kill = {"killed_at": 1_000.0, "last_step": 14, "cause": "executor 1 on 127.0.0.1 lost", "resumed_from": 10}
    results = _results()
    results["b10"] = {
        "rounds": [
            {"retry_s": 20.0, "in_job_s": 4.0, "ratio": 0.2, "in_job_lost_intervals": 0.8},
            {"retry_s": 22.0, "in_job_s": 6.6, "ratio": 0.3, "in_job_lost_intervals": 1.2},
        ],
        "spot": {
            "timeline": [{**kill, "to_first_step_s": 8.0}, {**kill, "killed_at": 1_012.5, "to_first_step_s": 9.0}],
            "total_steps": 70,
            "restarts": 2,
        },
        "steps": 60,
        "interval": 5,
        "step_s": 0.2,
        "kill_at": 13,
        "ratio_goal": 0.25,
        "lost_goal": 1.0,
        "median_ratio": 0.25,
        "max_in_job_lost_intervals": 1.2,
    }
    lines = b10_section(results)
    assert lines[0] == B10_START and lines[-1] == B10_END
    rows = {line.split(" | ")[0].lstrip("| "): line for line in lines if line.startswith("| ")}
    assert rows["in-job / retry"].endswith("| <= 0.25x (median) | met |"), rows  # the median, 0.25, meets it
    assert "| missed |" in rows["work lost per fault, in-job (steps trained again / checkpoint interval)"]  # 1.2 > 1
    assert rows["spot simulation: 2 kills in one try, steps trained in all"].endswith("one try | met |")
    assert any(line.startswith("| 2 | 12.5 (") and "| 9.00 s |" in line for line in lines), lines
