"""The PNG chart of B1/B7 (launch seconds) and B3/B8/B13 (samples/s), drawn with matplotlib when it is installed."""

from __future__ import annotations

from pathlib import Path


def draw(results: dict, path: Path) -> str:
    """Draw medians as bars and every sample as a dot; returns ``"written"`` or why no chart was drawn."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as err:
        return f"skipped: matplotlib is not installed ({err}); `.venv/bin/python -m pip install matplotlib`"
    panels = []
    b1 = results.get("b1")
    if isinstance(b1, dict) and "error" not in b1:
        names = ["ours", "horovod.spark.run", "TorchDistributor", "floor: fresh import", "floor: empty barrier job"]
        labels = [
            "ours\nHorovodRunner",
            "horovod.spark\n.run",
            "Torch\nDistributor",
            "floor:\nfresh import",
            "floor: empty\nbarrier job",
        ]
        panels.append(
            (
                "B1: trivial np=2 job, call -> rank-0 value (s, lower is better)",
                [(lab, b1[n]) for n, lab in zip(names, labels, strict=True)],
            )
        )
    b3 = results.get("b3")
    if isinstance(b3, dict) and "error" not in b3:
        names = ["ours np=2", "horovod.spark.run np=2", "bare horovodrun -np 2 --gloo", "ours np=1"]
        labels = ["ours\nnp=2", "horovod.spark.run\nnp=2", "bare\nhorovodrun", "ours\nnp=1"]
        panels.append(
            (
                "B3: example model training (samples/s, higher is better)",
                [(lab, b3[n]) for n, lab in zip(names, labels, strict=True) if n in b3],
            )
        )
    b7 = results.get("b7")
    if isinstance(b7, dict) and "error" not in b7:
        names = ["ours", "TorchDistributor", "floor: fresh import", "floor: empty barrier job"]
        labels = [
            "ours\nTorchDistributor",
            "pyspark\nTorchDistributor",
            "floor: 2 fresh\nimport torch",
            "floor: empty\nbarrier job",
        ]
        panels.append(
            (
                "B7: trivial np=2 DDP job, call -> rank-0 value (s, lower is better)",
                [(lab, b7[n]) for n, lab in zip(names, labels, strict=True)],
            )
        )
    b8 = results.get("b8")
    if isinstance(b8, dict) and "error" not in b8:
        names = ["ours DDP", "TorchDistributor DDP", "bare torchrun DDP", "ours Horovod (HorovodRunner)"]
        labels = ["ours\nDDP", "pyspark\nTorchDistributor", "bare\ntorchrun", "ours\nHorovod"]
        panels.append(
            (
                "B8: DDP training, steady state (samples/s, higher is better)",
                [(lab, b8[n]) for n, lab in zip(names, labels, strict=True)],
            )
        )
    b13 = results.get("b13")
    if isinstance(b13, dict) and "error" not in b13:
        names = ["ours", "ours, library progress off", "bare torchrun"]
        labels = ["ours\n(progress on)", "ours\nprogress off", "bare\ntorchrun"]
        panels.append(
            (
                "B13: Transformers Trainer, np=2, steady state (samples/s, higher is better)",
                [(lab, b13[n]) for n, lab in zip(names, labels, strict=True)],
            )
        )
    if not panels:
        return "skipped: none of B1, B3, B7, B8, B13 ran"
    cols = min(len(panels), 2)
    rows_n = (len(panels) + cols - 1) // cols
    fig, axes = plt.subplots(rows_n, cols, figsize=(6.5 * cols, 4.2 * rows_n), squeeze=False)
    for ax in axes.flat[len(panels) :]:
        ax.set_visible(False)
    colors = ["#d9822b", "#4c72b0", "#55a868", "#999999", "#bbbbbb"]
    for ax, (title, bars) in zip(axes.flat, panels, strict=False):
        for i, (_label, series) in enumerate(bars):
            if series.median is None:
                ax.text(i, 0, "could not run", rotation=90, ha="center", va="bottom", fontsize=8)
                continue
            ax.bar(i, series.median, color=colors[i % len(colors)])
            ax.scatter([i] * len(series.samples), series.samples, color="black", s=10, zorder=3)
            ax.text(
                i,
                series.median,
                f"{series.median:,.2f}" if series.median < 100 else f"{series.median:,.0f}",
                ha="center",
                va="bottom",
                fontsize=8,
            )
        ax.set_xticks(range(len(bars)), [label for label, _ in bars], fontsize=8)
        ax.set_title(title, fontsize=9)
        ax.grid(axis="y", alpha=0.3)
    meta = results.get("meta", {})
    fig.suptitle(
        f"airflow-provider-horovod benchmarks, {meta.get('date', '')}, {meta.get('cores')} cores, "
        f"local[2] Spark ({results['config']['mode']} run; bars = medians, dots = samples)",
        fontsize=9,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return "written"
