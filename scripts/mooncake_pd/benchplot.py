"""A PNG of the latency percentiles of benchmark runs (matplotlib, no display needed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mooncake_pd.bench import LATENCIES

PERCENTILES = (("p50", "median"), ("p90", "p90"), ("p99", "p99"))


def latency_plot(runs: list[tuple[str, dict[str, Any]]], out: Path) -> None:
    """One panel per latency (time to first token, time per output token, ...), bars of p50,
    p90 and p99 per run, side by side."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = [(short, name) for short, name in LATENCIES.items() if any(f"median_{short}_ms" in r for _, r in runs)]
    fig, axes = plt.subplots(1, max(len(shown), 1), figsize=(4 * max(len(shown), 1), 3.6), squeeze=False)
    width = 0.8 / max(len(runs), 1)
    for ax, (short, name) in zip(axes[0], shown, strict=False):
        for i, (label, result) in enumerate(runs):
            values = [result.get(f"{prefix}_{short}_ms") or 0.0 for _, prefix in PERCENTILES]
            positions = [p + (i - (len(runs) - 1) / 2) * width for p in range(len(PERCENTILES))]
            ax.bar(positions, values, width, label=label)
        ax.set_title(name, fontsize=10)
        ax.set_xticks(range(len(PERCENTILES)), [p for p, _ in PERCENTILES])
        ax.set_ylabel("ms")
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, format="png", dpi=100)
    plt.close(fig)
