"""Attention heatmaps as PNG files, for `transformer attention`: one layer's head (or the mean of its heads)
of cross, encoder or decoder self-attention, with the tokens on both axes."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from model.errors import ConfigError
from model.output import AttentionKind, AttentionMaps
from service.attention import VIEWS

MAX_LABEL = 16  # characters of a token shown on an axis


@dataclass(frozen=True)
class Heatmap:
    """One attention matrix, rows (queries) over columns (keys), with their labels."""

    weights: np.ndarray  # (rows, cols)
    rows: list[str]
    cols: list[str]
    title: str
    row_axis: str
    col_axis: str


def select(maps: AttentionMaps, kind: AttentionKind = "cross", layer: int = -1, head: int | None = None) -> Heatmap:
    """The matrix of one layer (negative counts from the last) and head, or the mean over heads if head is None."""
    stack, view = maps.of(kind), VIEWS[kind]
    if stack is None:
        raise ConfigError(f"this output has no {kind} attention")
    n_layers, n_heads = stack.shape[0], stack.shape[1]
    if not -n_layers <= layer < n_layers:
        raise ConfigError(f"layer {layer} does not exist: {kind} attention has {n_layers} layers (0 to {n_layers - 1})")
    if head is not None and not 0 <= head < n_heads:
        raise ConfigError(f"head {head} does not exist: each layer has {n_heads} heads (0 to {n_heads - 1})")
    per_layer = stack[layer].float()
    weights = per_layer.mean(0) if head is None else per_layer[head]
    rows, cols = maps.labels(kind)
    which = "mean over heads" if head is None else f"head {head}"
    title = f"{view.title}, layer {layer % n_layers}, {which}"
    return Heatmap(weights.numpy(), rows, cols, title, view.rows, view.cols)


def short(token: str) -> str:
    """A token cut to MAX_LABEL characters for an axis label."""
    return token if len(token) <= MAX_LABEL else token[: MAX_LABEL - 1] + "…"


def write_png(heatmap: Heatmap, path: str | Path, dpi: int = 120) -> Path:
    """Draw the heatmap with its token labels and a colour bar into a PNG file; the figure grows with the tokens."""
    from matplotlib.figure import Figure  # drawn with Agg; no pyplot globals, no display needed

    n_rows, n_cols = heatmap.weights.shape
    cell = 0.28  # inches per token
    width = min(4.0 + cell * n_cols, 60.0)
    height = min(3.0 + cell * n_rows, 60.0)
    fig = Figure(figsize=(width, height), dpi=dpi)
    ax = fig.subplots()
    image = ax.imshow(heatmap.weights, cmap="Blues", vmin=0.0, aspect="auto", interpolation="nearest")
    ax.set_xticks(
        range(n_cols), [short(t) for t in heatmap.cols], rotation=60, ha="right", rotation_mode="anchor", fontsize=8
    )
    ax.set_yticks(range(n_rows), [short(t) for t in heatmap.rows], fontsize=8)
    ax.set_xlabel(heatmap.col_axis)
    ax.set_ylabel(heatmap.row_axis)
    ax.set_title(heatmap.title, fontsize=10)
    fig.colorbar(image, ax=ax, fraction=0.04, pad=0.02, label="weight")
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, format="png")
    return out
