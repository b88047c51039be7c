"""A PNG of the training curves: training loss, dev loss, and the dev score."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def plot_curves(rows: list[dict[str, Any]], out: Path, score: str = "bleu") -> Path:
    """Draw metrics.jsonl rows: training and dev loss on the left axis, the dev score on the right."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    train = [(r["step"], r["loss"]) for r in rows if "loss" in r]
    dev = [(r["step"], r["dev_loss"]) for r in rows if "dev_loss" in r]
    scores = [(r["step"], r[score]) for r in rows if score in r]
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=100)
    if train:
        ax.plot(*zip(*train, strict=True), label="train loss (label-smoothed)", color="tab:blue")
    if dev:
        ax.plot(*zip(*dev, strict=True), "o-", label="dev NLL", color="tab:orange")
    ax.set_xlabel("step")
    ax.set_ylabel("loss per target token")
    ax.grid(alpha=0.3)
    handles, labels = ax.get_legend_handles_labels()
    if scores:
        right = ax.twinx()
        right.plot(*zip(*scores, strict=True), "s--", color="tab:green", label=f"dev {score}")
        right.set_ylabel(score)
        h, lab = right.get_legend_handles_labels()
        handles, labels = handles + h, labels + lab
    ax.legend(handles, labels, loc="upper right")
    ax.set_title("Training curves")
    fig.tight_layout()
    tmp = out.with_suffix(".tmp.png")
    fig.savefig(tmp)
    plt.close(fig)
    tmp.replace(out)
    return out
