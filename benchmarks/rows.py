"""
The results table's rows: targets, number formatting, verdicts, one row per contender and benchmark.

Imported by :mod:`benchmarks.report` (console and Markdown tables) and :mod:`benchmarks.pages`; it imports nothing
of the harness.
"""

from __future__ import annotations

B1_TARGET, B2_TARGET, B3_TARGET = 0.5, 1.15, 0.98
"""B1: ours <= 0.5x each alternative; B2: operator/hand <= 1.15x; B3: ours >= 0.98x."""
B1_FLOOR_TARGET = 1.25
"""B1: ours <= 1.25x the floor (issue #15)."""
B3_BARE_TARGET = 0.97
"""B3: ours >= 0.97x bare ``horovodrun -np 2 --gloo`` (issue #24)."""
B3_REPORT_TARGET = 1 / 1.02
"""B3: ours with ``report()`` every step at most 1.02x slower than without: >= 0.980x the samples/s (issue #25)."""
B7_TARGET, B7_FLOOR_TARGET = 0.20, 1.15
"""B7: ours <= 0.20x PySpark's TorchDistributor; ours <= 1.15x the floor (issue #24)."""
B8_TARGET, B8_BARE_TARGET = 1.0, 0.97
"""B8: ours >= 1.0x PySpark's TorchDistributor; ours >= 0.97x bare ``torchrun`` (issue #24)."""
B13_TARGET = 0.97
"""B13: ours >= 0.97x bare ``torchrun`` running the same Transformers ``Trainer`` script."""
B13_PROGRESS_TARGET = 0.98
"""B13: ours with its library progress callback (the default) >= 0.98x ours with it off (at most ~2% slower, as
B3's ``report()`` row)."""
B4_ABOVE_NOOP_MIB = 25
"""B4: the operator task process's peak RSS at most this many MiB above a no-op task's (issue #15)."""


def seconds(value: float | None) -> str:
    """
    ``1.23 s``, or ``-`` when not measured.

    :param value: seconds, or ``None``.
    """
    return "-" if value is None else f"{value:.2f} s"


def mib(value: float | None) -> str:
    """
    ``1,234 MiB`` from bytes, or ``-`` when not measured.

    :param value: bytes, or ``None``.
    """
    return "-" if value is None else f"{value / 2**20:,.0f} MiB"


def markdown_row(cells: list[str]) -> str:
    """
    One Markdown table row of ``cells``, a ``|`` inside a cell escaped.

    :param cells: the cells' texts.
    """
    return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"


def _fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "s":
        return seconds(value)
    if unit == "samples/s":
        return f"{value:,.0f} samples/s"
    if unit == "MiB":
        return mib(value)
    return f"{value:.3g} {unit}"


def _samples(series, unit: str) -> str:
    if unit == "samples/s":
        return ", ".join(f"{v:,.0f}" for v in series.samples)
    return ", ".join(f"{v:.2f}" for v in series.samples)


def verdict(ratio: float | None, target: float, at_most: bool) -> str:
    """
    ``met`` or ``missed`` against ``target``, or ``not measured``.

    :param ratio: the measured ratio, or ``None``.
    :param target: the goal.
    :param at_most: the goal is a ceiling (``<=``), else a floor (``>=``).
    """
    if ratio is None:
        return "not measured"
    ok = ratio <= target if at_most else ratio >= target
    return "met" if ok else "missed"


def rows(results: dict) -> list[dict]:
    """
    Table rows: benchmark, contender, median, samples, ratio, target, verdict.

    :param results: the run's results dict (what ``python -m benchmarks`` saves).
    """
    out: list[dict] = []

    few = results.get("config", {}).get("min_reps", 2) < 2  # --quick: one round may be all there is

    def add(
        bench: str, contender: str, value: str, samples: str = "", ratio: str = "", target: str = "", verdict: str = ""
    ) -> None:
        if few and verdict in ("met", "missed"):
            verdict += " (quick run: indicative)"
        out.append(
            {
                "bench": bench,
                "contender": contender,
                "median": value,
                "samples": samples,
                "ratio": ratio,
                "target": target,
                "verdict": verdict,
            }
        )

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
        add(
            "B1 launch",
            "ours: HorovodRunner(np=2).run",
            b1["ours"].reason or _fmt(ours, "s"),
            _samples(b1["ours"], "s"),
        )
        for name in ("horovod.spark.run", "TorchDistributor"):
            s = b1[name]
            ratio = ours / s.median if ours and s.median else None
            add(
                "B1 launch",
                name,
                s.reason or _fmt(s.median, "s"),
                _samples(s, "s"),
                f"ours/this = {ratio:.3f}x" if ratio else "",
                f"<= {B1_TARGET}x",
                verdict(ratio, B1_TARGET, True),
            )
        parts = [b1["floor: fresh import"], b1["floor: empty barrier job"]]
        for name, s in zip(("floor: fresh import torch+horovod.torch", "floor: empty barrier job"), parts, strict=True):
            add("B1 launch", name, s.reason or _fmt(s.median, "s"), _samples(s, "s"))
        if all(p.median is not None for p in parts):
            floor = sum(p.median for p in parts)
            add(
                "B1 launch",
                "floor total (sum of medians)",
                _fmt(floor, "s"),
                "",
                f"ours/floor = {ours / floor:.2f}x" if ours else "",
                f"<= {B1_FLOOR_TARGET}x",
                verdict(ours / floor if ours else None, B1_FLOOR_TARGET, True),
            )

    if not add_error("B2 operator", "b2"):
        series = results["b2"]["series"]
        op, hand = series["airflow dags test + HorovodRunnerOperator"], series["spark-submit by hand"]
        ratio = op.median / hand.median if op.median and hand.median else None
        add(
            "B2 operator",
            "airflow dags test + HorovodRunnerOperator",
            op.reason or _fmt(op.median, "s"),
            _samples(op, "s"),
            f"operator/hand = {ratio:.3f}x" if ratio else "",
            f"<= {B2_TARGET}x",
            verdict(ratio, B2_TARGET, True),
        )
        add(
            "B2 operator",
            "spark-submit by hand (same Spark confs)",
            hand.reason or _fmt(hand.median, "s"),
            _samples(hand, "s"),
        )
        noop = series["airflow dags test of a no-op task"]
        add(
            "B2 operator",
            "reference: airflow dags test of a no-op @task",
            noop.reason or _fmt(noop.median, "s"),
            _samples(noop, "s"),
        )
        if op.median and hand.median and noop.median:
            floor = (noop.median + hand.median) / hand.median
            add(
                "B2 operator",
                "estimate for a zero-cost operator (no-op task + hand spark-submit)",
                _fmt(noop.median + hand.median, "s"),
                "",
                f"(no-op + hand)/hand = {floor:.3f}x",
            )
        execute = results["b2"].get("execute")
        if execute is not None and execute.median and hand.median:
            net = execute.median / hand.median
            add(
                "B2 operator",
                "net of Airflow's fixed cost: the operator task's span (task started -> ended, same runs)",
                _fmt(execute.median, "s"),
                _samples(execute, "s"),
                f"task/hand = {net:.3f}x",
                f"<= {B2_TARGET}x",
                verdict(net, B2_TARGET, True),
            )

    if not add_error("B3 throughput", "b3"):
        b3 = results["b3"]
        ours, theirs, one = b3["ours np=2"], b3["horovod.spark.run np=2"], b3["ours np=1"]
        add("B3 throughput", "ours np=2", ours.reason or _fmt(ours.median, "samples/s"), _samples(ours, "samples/s"))
        ratio = ours.median / theirs.median if ours.median and theirs.median else None
        add(
            "B3 throughput",
            "horovod.spark.run np=2",
            theirs.reason or _fmt(theirs.median, "samples/s"),
            _samples(theirs, "samples/s"),
            f"ours/this = {ratio:.3f}x" if ratio else "",
            f">= {B3_TARGET}x",
            verdict(ratio, B3_TARGET, False),
        )
        bare = b3.get("bare horovodrun -np 2 --gloo")
        if bare is not None:
            ratio = ours.median / bare.median if ours.median and bare.median else None
            add(
                "B3 throughput",
                "bare horovodrun -np 2 --gloo (same function)",
                bare.reason or _fmt(bare.median, "samples/s"),
                _samples(bare, "samples/s"),
                f"ours/this = {ratio:.3f}x" if ratio else "",
                f">= {B3_BARE_TARGET}x",
                verdict(ratio, B3_BARE_TARGET, False),
            )
        reporting = b3.get("ours np=2, report() every step")
        if reporting is not None:
            ratio = reporting.median / ours.median if ours.median and reporting.median else None
            add(
                "B3 throughput",
                "ours np=2, runtime.report() of loss every step and epoch_loss every 50 (files written)",
                reporting.reason or _fmt(reporting.median, "samples/s"),
                _samples(reporting, "samples/s"),
                f"with/without = {ratio:.3f}x" if ratio else "",
                f">= {B3_REPORT_TARGET:.3f}x",
                verdict(ratio, B3_REPORT_TARGET, False),
            )
        scale = ours.median / one.median if ours.median and one.median else None
        add(
            "B3 throughput",
            "ours np=1",
            one.reason or _fmt(one.median, "samples/s"),
            _samples(one, "samples/s"),
            f"np2/np1 = {scale:.2f}x" if scale else "",
        )

    if results.get("b7") is not None and not add_error("B7 DDP launch", "b7"):
        b7 = results["b7"]
        ours = b7["ours"].median
        add(
            "B7 DDP launch",
            "ours: TorchDistributor(num_processes=2, local_mode=False).run",
            b7["ours"].reason or _fmt(ours, "s"),
            _samples(b7["ours"], "s"),
        )
        s = b7["TorchDistributor"]
        ratio = ours / s.median if ours and s.median else None
        add(
            "B7 DDP launch",
            "pyspark.ml.torch.distributor.TorchDistributor (same arguments)",
            s.reason or _fmt(s.median, "s"),
            _samples(s, "s"),
            f"ours/this = {ratio:.3f}x" if ratio else "",
            f"<= {B7_TARGET}x",
            verdict(ratio, B7_TARGET, True),
        )
        parts = [b7["floor: fresh import"], b7["floor: empty barrier job"]]
        for name, s in zip(
            ("floor: 2 fresh interpreters `import torch` at once", "floor: empty barrier job"), parts, strict=True
        ):
            add("B7 DDP launch", name, s.reason or _fmt(s.median, "s"), _samples(s, "s"))
        if all(p.median is not None for p in parts):
            floor = sum(p.median for p in parts)
            add(
                "B7 DDP launch",
                "floor total (sum of medians)",
                _fmt(floor, "s"),
                "",
                f"ours/floor = {ours / floor:.2f}x" if ours else "",
                f"<= {B7_FLOOR_TARGET}x",
                verdict(ours / floor if ours else None, B7_FLOOR_TARGET, True),
            )

    if results.get("b8") is not None and not add_error("B8 DDP throughput", "b8"):
        b8 = results["b8"]
        ours = b8["ours DDP"]
        add(
            "B8 DDP throughput",
            "ours: TorchDistributor np=2, DDP",
            ours.reason or _fmt(ours.median, "samples/s"),
            _samples(ours, "samples/s"),
        )
        for name, label, target in (
            ("TorchDistributor DDP", "pyspark TorchDistributor np=2, DDP", B8_TARGET),
            ("bare torchrun DDP", "bare torchrun --standalone --nproc_per_node=2, DDP", B8_BARE_TARGET),
        ):
            s = b8[name]
            ratio = ours.median / s.median if ours.median and s.median else None
            add(
                "B8 DDP throughput",
                label,
                s.reason or _fmt(s.median, "samples/s"),
                _samples(s, "samples/s"),
                f"ours/this = {ratio:.3f}x" if ratio else "",
                f">= {target}x",
                verdict(ratio, target, False),
            )
        hvd = b8["ours Horovod (HorovodRunner)"]
        ratio = ours.median / hvd.median if ours.median and hvd.median else None
        add(
            "B8 DDP throughput",
            "Horovod: HorovodRunner np=2, same model, data and steps",
            hvd.reason or _fmt(hvd.median, "samples/s"),
            _samples(hvd, "samples/s"),
            f"DDP/Horovod = {ratio:.3f}x" if ratio else "",
        )

    if results.get("b13") is not None and not add_error("B13 Trainer throughput", "b13"):
        b13 = results["b13"]
        ours, off, bare = b13["ours"], b13["ours, library progress off"], b13["bare torchrun"]
        add(
            "B13 Trainer throughput",
            "ours: TorchDistributor np=2 of the Trainer script (library progress callback on, the default)",
            ours.reason or _fmt(ours.median, "samples/s"),
            _samples(ours, "samples/s"),
        )
        ratio = ours.median / bare.median if ours.median and bare.median else None
        add(
            "B13 Trainer throughput",
            "bare torchrun --standalone --nproc_per_node=2 of the same script",
            bare.reason or _fmt(bare.median, "samples/s"),
            _samples(bare, "samples/s"),
            f"ours/this = {ratio:.3f}x" if ratio else "",
            f">= {B13_TARGET}x",
            verdict(ratio, B13_TARGET, False),
        )
        ratio = ours.median / off.median if ours.median and off.median else None
        add(
            "B13 Trainer throughput",
            "ours, library progress off (HOROVOD_AIRFLOW_LIBRARY_PROGRESS=0)",
            off.reason or _fmt(off.median, "samples/s"),
            _samples(off, "samples/s"),
            f"with/without = {ratio:.3f}x" if ratio else "",
            f">= {B13_PROGRESS_TARGET}x",
            verdict(ratio, B13_PROGRESS_TARGET, False),
        )

    if not add_error("B4 memory", "b4"):
        b4 = results["b4"]
        peak = b4["peak_bytes"]
        label = f"sync, ~{b4['train_seconds']:.0f} s training"
        add(
            "B4 memory",
            f"{label}: Airflow task process peak RSS",
            _fmt(peak["airflow"], "MiB"),
            f"{b4['samples']} samples",
        )
        noop = b4.get("noop_peak_airflow")
        if noop:
            above = (peak["airflow"] - noop) / 2**20
            add(
                "B4 memory",
                "reference: airflow dags test of a no-op @task, Airflow task process peak RSS",
                _fmt(noop, "MiB"),
                f"{b4['noop_samples']} samples",
                f"operator - no-op = {above:+.0f} MiB",
                f"<= +{B4_ABOVE_NOOP_MIB} MiB",
                verdict(above, B4_ABOVE_NOOP_MIB, True),
            )
        add("B4 memory", f"{label}: spark-submit JVM peak RSS", _fmt(peak["jvm"], "MiB"))
        add("B4 memory", f"{label}: Spark Python workers + ranks peak RSS (context)", _fmt(peak["spark_python"], "MiB"))
    if results.get("b4_cluster") is not None and not add_error("B4 deferral", "b4_cluster"):
        b4c = results["b4_cluster"]
        for mode, label in (("sync", "cluster mode, sync"), ("deferred", "cluster mode, deferrable")):
            run = b4c[mode]
            label = f"{label}, ~{b4c['train_seconds']:.0f} s training"
            if not run["phases"]:
                add(
                    "B4 deferral",
                    label,
                    "the log lacks the expected steps: "
                    + ("the task did not defer" if mode == "deferred" else "phases unknown"),
                )
                continue
            add(
                "B4 deferral",
                f"{label}: worker held (task code running)",
                f"{run['held_seconds']:.2f} s of {run['wall_seconds']:.2f} s",
                "",
                f"held/wall = {run['held_seconds'] / run['wall_seconds']:.2f}",
            )
            if mode == "deferred":
                add(
                    "B4 deferral",
                    f"{label}: trigger waits for the driver, no task code running (worker free)",
                    f"{run['window_seconds']:.2f} s",
                    "",
                    f"free/wall = {run['window_seconds'] / run['wall_seconds']:.2f}",
                )
            what = "while the trigger waits" if mode == "deferred" else "while execute() polls"
            add(
                "B4 deferral",
                f"{label}: processes below the Airflow process {what}",
                "-" if run["max_children"] is None else str(run["max_children"]),
                f"{run['window_samples']} samples",
            )
            add("B4 deferral", f"{label}: Airflow process peak RSS {what}", _fmt(run["peak_rss"], "MiB"))
    return out
