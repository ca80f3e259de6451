"""
B11's part of ``docs/benchmarks.md``: its section between :data:`B11_START` and :data:`B11_END` (which
``python -m benchmarks --only b11`` rewrites alone), and its chart, ``docs/scale_launch.png``.
"""

from __future__ import annotations

from pathlib import Path

from benchmarks.pages_b5 import section_opening
from benchmarks.rows import markdown_row, mib, verdict
from benchmarks.rows import seconds as _s
from benchmarks.scale_launch import OURS, PYSPARK, TORCHRUN, driver_medians, num

B11_START = "<!-- B11 section: written by benchmarks (python -m benchmarks --only b11 rewrites it alone) -->"
B11_END = "<!-- end of the B11 section -->"
LABELS = {OURS: "ours", TORCHRUN: "bare torchrun", PYSPARK: "PySpark TorchDistributor"}


def _few(results: dict) -> bool:
    """A single round (or a quick run's settings): verdicts are indicative only."""
    return results.get("config", {}).get("min_reps", 2) < 2 or results["b11"].get("rounds", 0) < 2


def _median_cell(series) -> str:
    """A launcher's median at one np, or why it has none; a failure after some samples is named too."""
    if series.median is None:
        return f"could not run: {series.reason or 'no sample'}"
    return _s(series.median) + (f" (then {series.reason})" if series.reason else "")


def _verdict(ratio: float | None, goal: float, quick: str) -> str:
    said = verdict(ratio, goal, at_most=True)
    return said if ratio is None else said + quick


def b11_table(results: dict) -> list[str]:
    """
    B11's Markdown table: one row per np with the three launchers' median seconds, ours / bare torchrun and ours /
    PySpark's with their verdicts, and the driver side's cost of ours (medians over the rounds).

    :param results: the run's results dict.
    """
    b11 = results["b11"]
    goals = b11.get("goals", {}) if "error" not in b11 else {}
    lines = [
        "| np | ours | bare torchrun | PySpark TorchDistributor | "
        f"ours / torchrun (goal <= {goals.get('vs_torchrun', 0):.2f}x) | verdict | "
        f"ours / TorchDistributor (goal <= {goals.get('vs_torch_distributor', 0):.2f}x) | verdict | "
        "ours: Python CPU | ours: Python peak RSS | ours: Spark JVM CPU | ours: Spark JVM peak RSS |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    if "error" in b11:
        return lines + [f"| (whole benchmark) | could not run: {b11['error']} |" + "  |" * 10]
    quick = " (quick run: indicative)" if _few(results) else ""
    for np in b11["sizes"]:
        ratios = b11["ratios"][np]
        cost = driver_medians(b11["driver"][OURS][np])
        cells = [
            str(np),
            *(_median_cell(b11["series"][name][np]) for name in (OURS, TORCHRUN, PYSPARK)),
            "-" if ratios["vs_torchrun"] is None else f"{ratios['vs_torchrun']:.2f}x",
            _verdict(ratios["vs_torchrun"], goals["vs_torchrun"], quick),
            "-" if ratios["vs_torch_distributor"] is None else f"{ratios['vs_torch_distributor']:.2f}x",
            _verdict(ratios["vs_torch_distributor"], goals["vs_torch_distributor"], quick),
            _s(cost["python_cpu_s"]),
            mib(cost["python_peak_rss_bytes"]),
            _s(cost["jvm_cpu_s"]),
            mib(cost["jvm_peak_rss_bytes"]),
        ]
        lines.append(markdown_row(cells))
    return lines


def model_heading(model: dict) -> str:
    """
    The example model's leg in words: ``"the example model, DDP, W + N steps per rank"``.

    :param model: ``results["b11"]["model"]``.
    """
    return f"the example model, DDP, {model['warmup_steps']} + {model['steps']} steps per rank"


def b11_model_table(results: dict) -> list[str]:
    """
    B11's second Markdown table, the example model's leg (informational: the issue's goals are on the trivial
    job): one row per np with ours' and bare torchrun's median seconds from the call to rank 0's result, ours /
    bare torchrun, and the median samples/s each reported; ``[]`` where the leg did not run (an older result, or
    B11 could not run at all).

    :param results: the run's results dict.
    """
    b11 = results["b11"]
    model = b11.get("model") if "error" not in b11 else None
    if not model:
        return []
    quick = " (quick run)" if _few(results) else ""
    lines = [
        f"| np | ours | bare torchrun | ours / torchrun (informational, no goal){quick} | ours: samples/s | "
        "bare torchrun: samples/s |",
        "|---|---|---|---|---|---|",
    ]
    for np in b11["sizes"]:
        ratio = model["ratios"][np]
        rates = [model["samples_per_s"][name][np].median for name in (OURS, TORCHRUN)]
        cells = [
            str(np),
            *(_median_cell(model["series"][name][np]) for name in (OURS, TORCHRUN)),
            "-" if ratio is None else f"{ratio:.2f}x",
            *("-" if rate is None else f"{rate:,.0f}" for rate in rates),
        ]
        lines.append(markdown_row(cells))
    return lines


def _raw_lines(b11: dict) -> list[str]:
    """Every sample, per np and launcher, in round order; the driver side's numbers of both Spark launchers; and the
    example model's samples (seconds and samples/s) where its leg ran."""
    out = ["Raw samples (seconds, in round order):", ""]
    for np in b11["sizes"]:
        parts = []
        for name in (OURS, TORCHRUN, PYSPARK):
            s = b11["series"][name][np]
            values = ", ".join(f"{v:.2f}" for v in s.samples) or "none"
            parts.append(f"{LABELS[name]} {values}" + (f" ({s.reason})" if s.reason else ""))
        out.append(f"- np={np}: " + "; ".join(parts))
    out += ["", "Driver side per call (Python CPU s / Python peak RSS MiB / JVM CPU s / JVM peak RSS MiB):", ""]
    for np in b11["sizes"]:
        parts = []
        for name in (OURS, PYSPARK):
            calls = b11["driver"][name][np]
            values = ", ".join(
                f"{num(c['python_cpu_s'])}/{num(c['python_peak_rss_bytes'], 2**20, 0)}/"
                f"{num(c['jvm_cpu_s'])}/{num(c['jvm_peak_rss_bytes'], 2**20, 0)}"
                for c in calls
            )
            parts.append(f"{LABELS[name]} {values or 'none'}")
        out.append(f"- np={np}: " + "; ".join(parts))
    model = b11.get("model")
    if model:
        out += ["", f"Raw samples of {model_heading(model)} (seconds, then samples/s, in round order):", ""]
        for np in b11["sizes"]:
            parts = []
            for name in (OURS, TORCHRUN):
                s = model["series"][name][np]
                values = ", ".join(f"{v:.2f}" for v in s.samples) or "none"
                rates = ", ".join(f"{v:,.0f}" for v in model["samples_per_s"][name][np].samples)
                parts.append(
                    f"{LABELS[name]} {values}"
                    + (f" ({rates} samples/s)" if rates else "")
                    + (f" ({s.reason})" if s.reason else "")
                )
            out.append(f"- np={np}: " + "; ".join(parts))
    return out


def b11_section(results: dict, standalone_run: bool = False) -> list[str]:
    """
    The B11 section, between :data:`B11_START` and :data:`B11_END`: what was measured and how, the table, the
    example model's table (informational), every raw sample, the load.

    :param results: the run's results dict.
    :param standalone_run: the section is written into a page from an earlier full run (``--only b11``).
    """
    b11 = results["b11"]
    heading = "## B11 launch and run cost against the number of ranks"
    out = section_opening(B11_START, heading, results, "b11", standalone_run)
    if "error" in b11:
        return out + [*b11_table(results), "", B11_END]
    out += [
        f"Seconds from the call to rank 0's value of a trivial `torch.distributed` job (gloo, one `all_reduce` of "
        f"ones; rank 0 must return np) at np = {', '.join(str(n) for n in b11['sizes'])}, for three launchers side "
        f"by side: ours `TorchDistributor(num_processes=np, local_mode=False, use_gpu=False)` and PySpark's "
        f"`pyspark.ml.torch.distributor.TorchDistributor` (same arguments), both on one running "
        f"`{b11['master']}` SparkSession (127.0.0.1; one barrier task per rank), and bare `torchrun --standalone "
        f"--nproc_per_node=np` of the same job as a script (a subprocess, its ranks with `OMP_NUM_THREADS="
        f"{b11['omp_threads']}` as ours get; timed to the launcher's exit). One untimed warm-up of each launcher at "
        f"np={b11['sizes'][0]}, then {b11['rounds']} round(s) of {b11['reps']} planned, np ascending in each, the "
        "launchers' order rotating; the table has medians and ratios of medians. Driver side, for each call of "
        "ours: CPU seconds (user + system) over the call of this Python process (where an Airflow task makes the "
        "call) and of the Spark driver JVM (in local mode it also runs the executor's task threads; its Python "
        f"workers and the ranks are not counted), and their peak RSS, sampled every {b11['sample_s']} s. On "
        f"{results.get('meta', {}).get('cores', '?')} cores every launcher's absolute time grows with np; the "
        "ratios are what is compared.",
        "",
        *b11_table(results),
        "",
    ]
    model = b11.get("model")
    if model:
        out += [
            f"### B11, {model_heading(model)} (informational)",
            "",
            "Issue #38 asks for the curve of the example model too; its goals are judged on the trivial job above, "
            "this table is informational (no verdict). At each np of each round, after the trivial job's three "
            "launchers, ours and bare `torchrun --standalone --nproc_per_node=np -m benchmarks.bare_throughput` "
            "(PySpark's `TorchDistributor` is left out: B8 compares it) run B8's job, `benchmarks.jobs."
            f"ddp_train_throughput`: the example DAG's model with DDP (gloo), batch {model['batch_size']} per rank, "
            f"{model['warmup_steps']} untimed then {model['steps']} timed steps per rank, one untimed warm-up of each "
            f"at np={b11['sizes'][0]}. Seconds from the call to rank 0's result (launch, data load, training, "
            "exit; medians), their ratio, and the global samples/s the job reports over its timed steps "
            "(medians); rank 0's result must report samples/s above 0 and world size np.",
            "",
            *b11_model_table(results),
            "",
        ]
    for note in results.get("notes", []):
        if note.startswith("B11"):
            out += [f"Time budget: {note}.", ""]
    loads = " / ".join(f"{x[0]:.1f}" for x in (b11.get("load_start"), b11.get("load_end")) if x)
    if loads:
        out += [f"1-minute load average at B11's start / end: {loads} on {results['meta']['cores']} cores.", ""]
    out += [*_raw_lines(b11), B11_END]
    return out


def b11_chart(results: dict, path: Path) -> str:
    """
    Draw B11's launch seconds against np for the three launchers (medians as lines, every sample as a dot; log2 x
    axis) and the two ratios with their goals, to ``path`` (PNG); where the example model's leg ran, its seconds
    for ours and bare torchrun and their ratio as dashed lines (samples as crosses).

    :param results: the run's results dict.
    :param path: where to write the PNG.
    :return: ``"written"``, or why no chart was drawn.
    """
    b11 = results.get("b11")
    if not isinstance(b11, dict) or "error" in b11:
        return "skipped: B11 did not run"
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as err:
        return f"skipped: matplotlib is not installed ({err}); `.venv/bin/python -m pip install matplotlib`"
    sizes = b11["sizes"]
    colors = {OURS: "#d9822b", TORCHRUN: "#55a868", PYSPARK: "#4c72b0"}
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.4))
    for name in (OURS, TORCHRUN, PYSPARK):
        points = [(np, b11["series"][name][np]) for np in sizes]
        measured = [(np, s.median) for np, s in points if s.median is not None]
        if measured:
            left.plot(*zip(*measured, strict=True), marker="o", color=colors[name], label=LABELS[name])
        for np, s in points:
            left.scatter([np] * len(s.samples), s.samples, color="black", s=8, zorder=3)
    model = b11.get("model")
    if model:
        for name in (OURS, TORCHRUN):
            points = [(np, model["series"][name][np]) for np in sizes]
            measured = [(np, s.median) for np, s in points if s.median is not None]
            if measured:
                left.plot(
                    *zip(*measured, strict=True),
                    marker="s",
                    linestyle="--",
                    color=colors[name],
                    label=f"{LABELS[name]}, example model",
                )
            for np, s in points:
                left.scatter([np] * len(s.samples), s.samples, color="black", s=8, marker="x", zorder=3)
        measured = [(np, model["ratios"][np]) for np in sizes if model["ratios"][np] is not None]
        if measured:
            right.plot(
                *zip(*measured, strict=True),
                marker="s",
                linestyle="--",
                color="#8172b2",
                label="ours / bare torchrun, example model (no goal)",
            )
    title = "trivial np=N job (solid)" + (", example model (dashed)" if model else "")
    left.set_title(f"B11: {title}, call -> rank-0 value (s, lower is better)", fontsize=9)
    left.set_ylabel("seconds")
    right.set_title("B11: ratios of medians (lower is better)", fontsize=9)
    for key, label, color in (
        ("vs_torchrun", "ours / bare torchrun", colors[TORCHRUN]),
        ("vs_torch_distributor", "ours / PySpark TorchDistributor", colors[PYSPARK]),
    ):
        measured = [(np, b11["ratios"][np][key]) for np in sizes if b11["ratios"][np][key] is not None]
        if measured:
            right.plot(*zip(*measured, strict=True), marker="o", color=color, label=label)
        right.axhline(b11["goals"][key], color=color, linestyle="--", linewidth=1, label=f"goal {label}")
    for ax in (left, right):
        ax.set_xscale("log", base=2)
        ax.set_xticks(sizes, [str(n) for n in sizes])
        ax.set_xlabel("np (ranks)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    meta = results.get("meta", {})
    fig.suptitle(
        f"airflow-provider-horovod B11, {meta.get('date', '')}, {meta.get('cores')} cores, {b11['master']} Spark "
        f"({results.get('config', {}).get('mode', '?')} run, {b11['rounds']} round(s); "
        "lines = medians, dots = samples)",
        fontsize=9,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return "written"
