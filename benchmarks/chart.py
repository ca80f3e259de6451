"""The PNG chart of B1 (launch seconds) and B3 (samples/s), drawn with matplotlib when it is installed."""

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
        labels = ["ours\nHorovodRunner", "horovod.spark\n.run", "Torch\nDistributor", "floor:\nfresh import",
                  "floor: empty\nbarrier job"]
        panels.append(("B1: trivial np=2 job, call -> rank-0 value (s, lower is better)",
                       [(lab, b1[n]) for n, lab in zip(names, labels)]))
    b3 = results.get("b3")
    if isinstance(b3, dict) and "error" not in b3:
        names = ["ours np=2", "horovod.spark.run np=2", "ours np=1"]
        labels = ["ours\nnp=2", "horovod.spark.run\nnp=2", "ours\nnp=1"]
        panels.append(("B3: example model training (samples/s, higher is better)",
                       [(lab, b3[n]) for n, lab in zip(names, labels)]))
    if not panels:
        return "skipped: neither B1 nor B3 ran"
    fig, axes = plt.subplots(1, len(panels), figsize=(6.5 * len(panels), 4.2), squeeze=False)
    colors = ["#d9822b", "#4c72b0", "#55a868", "#999999", "#bbbbbb"]
    for ax, (title, bars) in zip(axes[0], panels):
        for i, (label, series) in enumerate(bars):
            if series.median is None:
                ax.text(i, 0, "could not run", rotation=90, ha="center", va="bottom", fontsize=8)
                continue
            ax.bar(i, series.median, color=colors[i % len(colors)])
            ax.scatter([i] * len(series.samples), series.samples, color="black", s=10, zorder=3)
            ax.text(i, series.median, f"{series.median:,.2f}" if series.median < 100 else f"{series.median:,.0f}",
                    ha="center", va="bottom", fontsize=8)
        ax.set_xticks(range(len(bars)), [label for label, _ in bars], fontsize=8)
        ax.set_title(title, fontsize=9)
        ax.grid(axis="y", alpha=0.3)
    meta = results.get("meta", {})
    fig.suptitle(f"airflow-provider-horovod benchmarks, {meta.get('date', '')}, {meta.get('cores')} cores, "
                 f"local[2] Spark ({results['config']['mode']} run; bars = medians, dots = samples)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return "written"
