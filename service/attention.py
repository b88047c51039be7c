"""Attention maps as the service sends them: which maps a request asks for (AttentionSelection), what each kind's
rows and columns are (VIEWS, for the page and the PNG heatmap alike), the compact JSON a worker makes once and
the API passes on unparsed (maps_json), and how many weights a selection may return."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from model.config import ModelConfig
from model.output import ATTENTION_KINDS, AttentionKind, AttentionMaps
from service.errors import InvalidRequest, TooCostly

DECIMALS = 3  # weights are rounded to this many decimals


@dataclass(frozen=True)
class View:
    """What one kind of attention shows: its title, and its rows (queries) and columns (keys)."""

    title: str
    rows: str
    cols: str


VIEWS: dict[AttentionKind, View] = {
    "cross": View("Encoder–decoder attention", "output tokens", "source tokens"),
    "encoder": View("Encoder self-attention", "source tokens (queries)", "source tokens (keys)"),
    "decoder": View("Decoder self-attention", "output tokens", "decoder inputs (keys)"),
}


@dataclass(frozen=True)
class AttentionSelection:
    """Which attention maps a /attention request answers: of which sentence of the text and which hypothesis of
    its n-best list (from 0), and which kinds, layers and heads (None: every one)."""

    kinds: tuple[AttentionKind, ...] = ATTENTION_KINDS
    layers: tuple[int, ...] | None = None
    heads: tuple[int, ...] | None = None
    hypothesis: int = 0
    sentence: int = 0

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AttentionSelection:
        layers, heads = data.get("layers"), data.get("heads")
        return cls(
            tuple(data["kinds"]),
            None if layers is None else tuple(layers),
            None if heads is None else tuple(heads),
            int(data.get("hypothesis", 0)),
            int(data.get("sentence", 0)),
        )

    def cells(self, source: int, limit: int, model: ModelConfig) -> int:
        """The most attention weights one output may return: T = limit + 1 queries (EOS included)."""
        heads = model.h if self.heads is None else len(self.heads)
        target = limit + 1
        shapes = {
            "cross": (model.n_dec, target * source),
            "encoder": (model.N, source * source),
            "decoder": (model.n_dec, target * target),
        }
        return sum(
            (n if self.layers is None else len(self.layers)) * heads * cells
            for kind, (n, cells) in shapes.items()
            if kind in self.kinds
        )

    def check(self, model: ModelConfig) -> None:
        """InvalidRequest unless the layers and heads exist in every stack asked for."""
        for kind in self.kinds:
            n = model.N if kind == "encoder" else model.n_dec
            bad = [i for i in self.layers or () if i >= n]
            if bad:
                raise InvalidRequest(
                    "layers", f"{kind} attention has {n} layers (0 to {n - 1}); there is no layer {bad[0]}"
                )
        bad = [i for i in self.heads or () if i >= model.h]
        if bad:
            raise InvalidRequest(
                "heads", f"each layer has {model.h} heads (0 to {model.h - 1}); there is no head {bad[0]}"
            )


def check_cells(cells: int, limit: int) -> None:
    if cells > limit:
        raise TooCostly(
            "q",
            f"the attention maps could hold {cells:,} weights, more than the limit of {limit:,} "
            "(TRANSFORMER_MAX_ATTENTION_CELLS): ask for fewer kinds, layers or heads, or a smaller max_length",
        )


def weights_json(t: Tensor, selection: AttentionSelection) -> str:
    """(layers, h, queries, keys) weights as JSON [layer][head][query][key], of the selected layers and heads,
    rounded: the rounding is done in float64, so that 0.158 prints as 0.158. One matrix is encoded at a
    time, so that a thread serving HTTP in the same process gets the interpreter in between."""
    layers = range(t.size(0)) if selection.layers is None else selection.layers
    heads = range(t.size(1)) if selection.heads is None else selection.heads
    rounded = torch.round(t.double(), decimals=DECIMALS)
    return (
        "["
        + ",".join(
            "[" + ",".join(json.dumps(rounded[layer, head].tolist(), separators=(",", ":")) for head in heads) + "]"
            for layer in layers
        )
        + "]"
    )


def maps_json(maps: AttentionMaps, selection: AttentionSelection) -> str:
    """Compact JSON for a browser: the tokens, what each kind asked for shows (VIEWS, with its row and column
    tokens) and its [layer][head][query][key] weights, rounded; a kind not asked for is null."""
    axes = {}
    for kind in ATTENTION_KINDS:
        if kind in selection.kinds and maps.of(kind) is not None:
            rows, cols = maps.labels(kind)
            view = VIEWS[kind]
            axes[kind] = {
                "title": view.title,
                "rows": view.rows,
                "cols": view.cols,
                "row_tokens": rows,
                "col_tokens": cols,
            }
    head = json.dumps(
        {"source_tokens": maps.source_tokens, "target_tokens": maps.target_tokens, "axes": axes}, ensure_ascii=False
    )
    weights = ",".join(
        f'"{kind}":' + (weights_json(t, selection) if kind in axes and (t := maps.of(kind)) is not None else "null")
        for kind in ATTENTION_KINDS
    )
    return head[:-1] + "," + weights + "}"
