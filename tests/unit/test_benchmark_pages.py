"""The partial-run page merge of ``benchmarks/pages_partial.py``: what an earlier "Rerun alone" line keeps."""

from __future__ import annotations

from pathlib import Path

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
    assert rows["in-job / retry started at once"].endswith("| <= 0.25x (median) | met |"), (
        rows
    )  # the median, 0.25, meets it
    assert "| missed |" in rows["work lost per fault, in-job (steps trained again / checkpoint interval)"]  # 1.2 > 1
    assert rows["spot simulation: 2 kills in one try, steps trained in all"].endswith("one try | met |")
    assert any(line.startswith("| 2 | 12.5 (") and "| 9.00 s |" in line for line in lines), lines
    assert not any("through Airflow" in line for line in lines)  # a run without the rounds through Airflow

    # the rounds through a real Airflow deployment: judged on their own ratio (median of 0.2 and 0.4: missed)
    through = {
        "retry_s": 20.0,
        "in_job_s": 4.0,
        "ratio": 0.2,
        "retry_lost_intervals": 0.6,
        "in_job_lost_intervals": 0.6,
    }
    results["b10"]["airflow"] = {
        "rounds": [
            {**through, "failed_try_end_s": 1.5, "retry_start_s": 2.5},
            {**through, "in_job_s": 8.0, "ratio": 0.4, "failed_try_end_s": 1.7, "retry_start_s": 2.1},
        ],
        "median_ratio": 0.3,
    }
    rows = {line.split(" | ")[0].lstrip("| "): line for line in b10_section(results) if line.startswith("| ")}
    assert rows["**in-job / Airflow retry**, through Airflow"].endswith("| <= 0.25x (median) | missed |"), rows
    assert rows["in-job / retry started at once"].endswith("| met |")  # the script rounds keep their own verdict
    assert "| 2.30 s | 2.50 s, 2.10 s |" in rows["of which: kill -> Airflow started the retry"]
    results["b10"]["airflow"] = {"error": "DeploymentError: did not start"}
    assert "| (the rounds through Airflow) | could not run: DeploymentError: did not start |" in "\n".join(
        b10_section(results)
    )


def _b11_results(ours_s: float, rounds: int = 3) -> dict:
    """A B11 result at np=2 and np=16: bare torchrun 2 s / 8 s, PySpark's 10 s / 40 s, ours ``ours_s`` at np=2 and
    failed at np=16; bare torchrun never ran at np=16. The example model: ours 6 s (3,000 samples/s) and 24 s
    (2,500 samples/s), bare torchrun 4 s (3,200 samples/s) at np=2 and failed at np=16."""
    from benchmarks.contenders import Series
    from benchmarks.scale_launch import OURS, PYSPARK, TORCHRUN

    mib = 2**20
    call = {"python_cpu_s": 0.4, "jvm_cpu_s": 1.5, "python_peak_rss_bytes": 300 * mib, "jvm_peak_rss_bytes": 900 * mib}
    ours16 = Series(reason="failed at np=16: RankFailedError: rank 7 failed")
    series = {
        OURS: {2: Series([ours_s] * rounds), 16: ours16},
        TORCHRUN: {2: Series([2.0] * rounds), 16: Series(reason="failed at np=16: RuntimeError: torchrun exited 1")},
        PYSPARK: {2: Series([10.0] * rounds), 16: Series([40.0] * rounds)},
    }
    results = _results()
    results["config"]["min_reps"] = 2
    results["b11"] = {
        "sizes": [2, 16],
        "series": series,
        "driver": {OURS: {2: [call] * rounds, 16: []}, PYSPARK: {2: [call] * rounds, 16: [call] * rounds}},
        "ratios": {
            2: {"vs_torchrun": ours_s / 2.0, "vs_torch_distributor": ours_s / 10.0},
            16: {"vs_torchrun": None, "vs_torch_distributor": None},
        },
        "goals": {"vs_torchrun": 1.1, "vs_torch_distributor": 0.3},
        "rounds": rounds,
        "reps": 3,
        "omp_threads": "1",
        "master": "local[16]",
        "sample_s": 0.15,
        "load_start": [1.5, 1.0, 0.5],
        "load_end": [3.3, 2.0, 1.0],
        "model": {
            "contenders": [OURS, TORCHRUN],
            "series": {
                OURS: {2: Series([6.0] * rounds), 16: Series([24.0] * rounds)},
                TORCHRUN: {2: Series([4.0] * rounds), 16: Series(reason="failed at np=16: RuntimeError: torchrun x|y")},
            },
            "samples_per_s": {
                OURS: {2: Series([3000.0] * rounds), 16: Series([2500.0] * rounds)},
                TORCHRUN: {2: Series([3200.0] * rounds), 16: Series()},
            },
            "ratios": {2: 1.5, 16: None},
            "batch_size": 32,
            "warmup_steps": 5,
            "steps": 20,
        },
    }
    return results


def test_the_b11_section_judges_both_ratios_at_each_np_and_names_a_failure():
    from benchmarks.pages_b11 import B11_END, B11_START, b11_section, b11_table

    def row(results: dict, np: int) -> list[str]:
        (line,) = [ln for ln in b11_table(results) if ln.startswith(f"| {np} | ")]
        return [cell.strip() for cell in line.strip("|").split(" | ")]

    met = row(_b11_results(2.1), 2)  # 1.05x torchrun, 0.21x PySpark's: both goals met
    assert met[1:8] == ["2.10 s", "2.00 s", "10.00 s", "1.05x", "met", "0.21x", "met"], met
    assert met[8:] == ["0.40 s", "300 MiB", "1.50 s", "900 MiB"], met
    missed = row(_b11_results(3.5), 2)  # 1.75x torchrun, 0.35x PySpark's: both missed
    assert missed[4:8] == ["1.75x", "missed", "0.35x", "missed"], missed
    one_round = row(_b11_results(2.1, rounds=1), 2)
    assert one_round[5] == "met (quick run: indicative)", one_round

    failed = row(_b11_results(2.1), 16)
    assert failed[1] == "could not run: failed at np=16: RankFailedError: rank 7 failed", failed
    assert failed[2].startswith("could not run: failed at np=16: RuntimeError: torchrun exited 1"), failed
    assert failed[3] == "40.00 s" and failed[4:8] == ["-", "not measured", "-", "not measured"], failed

    results = _b11_results(2.1)
    results["notes"] = ["B11: 2 of 3 rounds (the next would have passed its 480 s budget)", "B10: other"]
    lines = b11_section(results)
    assert lines[0] == B11_START and lines[-1] == B11_END
    assert "Time budget: B11: 2 of 3 rounds (the next would have passed its 480 s budget)." in lines
    assert not any("B10: other" in line for line in lines)
    assert "1-minute load average at B11's start / end: 1.5 / 3.3 on 2 cores." in lines, lines
    raw = [line for line in lines if line.startswith("- np=16: ours ")]
    assert raw[0] == (
        "- np=16: ours none (failed at np=16: RankFailedError: rank 7 failed); bare torchrun none "
        "(failed at np=16: RuntimeError: torchrun exited 1); PySpark TorchDistributor 40.00, 40.00, 40.00"
    ), raw


def test_the_b11_section_of_a_benchmark_that_could_not_run_says_why():
    from benchmarks.pages_b11 import B11_END, b11_chart, b11_section

    results = _results()
    results["b11"] = {"error": "RuntimeError: a SparkSession on local[2] is already running"}
    lines = b11_section(results)
    assert lines[-1] == B11_END
    assert any("could not run: RuntimeError: a SparkSession on local[2] is already running" in ln for ln in lines)
    assert b11_chart(results, Path("unused.png")) == "skipped: B11 did not run"


def _b12_result(size: int, cores: float, lags: list[float], lines_received: int | None = None) -> dict:
    return {
        "size": size,
        "seconds": 20.0,
        "driver_cores": cores,
        "driver_peak_rss": 40 * 2**20,
        "driver_threads": size + 4,
        "lags_s": lags,
        "ages_s": [lag + 0.3 for lag in lags],
        "max_lag_s": max(lags),
        "rank0_records_sent": 40,
        "rank0_records_kept": 40,
        "ranks_last_step_right": size,
        "lines_sent": size * 20,
        "lines_received": size * 20 if lines_received is None else lines_received,
        "silent_tasks": [],
        "files": {"progress.json": 50 * 1024, "metrics.jsonl": 4700},
    }


def test_the_b12_section_judges_cores_lag_and_loss_at_each_size():
    from benchmarks.pages_b12 import b12_section, b12_table

    results = {
        "config": {"min_reps": 2},
        "b12": {
            "sizes": {
                64: _b12_result(64, 0.02, [0.2, 0.3]),
                256: _b12_result(256, 0.1, [0.2, 1.4]),  # a line 1.4 s behind
                1024: _b12_result(1024, 0.3, [0.3, 0.5], lines_received=1024 * 20 - 3),  # three lines lost
            },
            "records_per_s": 2.0,
            "lines_per_s": 1.0,
            "processes": 4,
            "cores_goal": 1.0,
            "lag_goal_s": 1.0,
            "load_start": (0.5, 0.4, 0.3),
            "load_end": (1.5, 0.9, 0.5),
            "rendezvous": [{"size": 64, "seconds": 5.0, "requests": 4096, "requests_per_s": 819.2}],
            "rendezvous_extrapolated_s": {"1024": 1281.2},
            "rendezvous_backlog_5": [{"size": 64, "seconds": 9.5}],
        },
    }
    table = b12_table(results)
    rows = {row.split("|")[1].strip(): row for row in table[2:]}
    assert rows["64"].rstrip(" |").endswith("met")
    assert "1.40 s" in rows["256"] and rows["256"].rstrip(" |").endswith("missed")
    assert "lines 20477/20480" in rows["1,024"] and rows["1,024"].rstrip(" |").endswith("missed")
    results["meta"] = {"date": "2026-12-07", "versions": {}, "load_start": (0.5, 0.4, 0.3), "cores": 2}
    results["config"]["mode"] = "full"
    text = "\n".join(b12_section(results, standalone_run=True))
    assert "--only b12" in text and "4,096 requests" in text
    assert "64 ranks 9.50 s (against 5.00 s)" in text and "1,024 ranks 1,281 s" in text
    results["b12"]["sizes"][64]["driver_cores"] = 1.2  # more than a core
    assert b12_table(results)[2].rstrip(" |").endswith("missed")


def test_the_b11_section_shows_the_example_models_leg_without_a_verdict():
    from benchmarks.pages_b11 import b11_model_table, b11_section
    from benchmarks.report import console_table

    results = _b11_results(2.1)
    table = b11_model_table(results)
    assert "informational, no goal" in table[0], table[0]
    rows = {ln.split(" | ")[0].lstrip("| "): [c.strip() for c in ln.strip("|").split(" | ")] for ln in table[2:]}
    assert rows["2"] == ["2", "6.00 s", "4.00 s", "1.50x", "3,000", "3,200"], rows
    assert rows["16"] == [
        "16",
        "24.00 s",
        "could not run: failed at np=16: RuntimeError: torchrun x\\|y",  # a "|" in the reason is escaped
        "-",
        "2,500",
        "-",
    ], rows
    assert not any("met" in ln or "missed" in ln for ln in table), table

    lines = b11_section(results)
    assert "### B11, the example model, DDP, 5 + 20 steps per rank (informational)" in lines, lines
    assert lines.index(table[0]) > lines.index(next(ln for ln in lines if ln.startswith("| np | ours | bare")))
    assert (
        "- np=2: ours 6.00, 6.00, 6.00 (3,000, 3,000, 3,000 samples/s); "
        "bare torchrun 4.00, 4.00, 4.00 (3,200, 3,200, 3,200 samples/s)"
    ) in lines, lines
    assert "- np=16: ours 24.00, 24.00, 24.00 (2,500, 2,500, 2,500 samples/s); bare torchrun none " in "\n".join(lines)

    printed = console_table(results)
    assert "B11 the example model, DDP, 5 + 20 steps per rank (informational, no goal):" in printed
    assert "| 2 | 6.00 s | 4.00 s | 1.50x | 3,000 | 3,200 |" in printed

    del results["b11"]["model"]  # a result from before the leg existed: no second table
    assert b11_model_table(results) == []
    assert not any(ln.startswith("### B11") for ln in b11_section(results))


def test_b11_accepts_only_a_sane_example_model_result():
    import pytest

    from benchmarks.scale_launch import check_model_result

    assert check_model_result({"samples_per_s": 1234.5, "size": 4, "rank": 0}, 4) == 1234.5
    assert check_model_result({"samples_per_s": 10}, 16) == 10.0  # no size reported: not checked
    for bad, match in (
        ({"samples_per_s": 0.0, "size": 4}, "samples_per_s=0.0"),
        ({"samples_per_s": 100.0, "size": 2}, "world size 2, expected 4"),
        ({"samples_per_s": 100.0, "size": 4, "rank": 3}, "rank 3"),
        (4.0, "expected a dict"),
        ({"size": 4}, "expected a dict"),
    ):
        with pytest.raises(RuntimeError, match=match):
            check_model_result(bad, 4)
