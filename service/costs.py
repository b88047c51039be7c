"""What a request may cost the workers, known before it is queued: its decoding cost and, for /attention,
the number of attention weights it returns. The limits are settings (TRANSFORMER_MAX_REQUEST_COST,
TRANSFORMER_MAX_JOB_COST, TRANSFORMER_MAX_ATTENTION_CELLS); a request over one is refused with 413."""

from __future__ import annotations

from model.config import DecodingConfig, ModelConfig
from service.errors import InvalidRequest, TooCostly
from service.tasks import AttentionSelection


def decode_cost(lengths: list[int], cfg: DecodingConfig, model_max_len: int) -> int:
    """For each text: beam_size x output limit x (source tokens + output limit), the (query, key) pairs its
    hypotheses may attend over if they run to the limit. The decoder's other work grows with beam x limit,
    so this tracks worker time within a factor of about two for a given model."""
    return sum(
        cfg.beam_size * limit * (n + limit) for n, limit in ((n, cfg.output_limit(n, model_max_len)) for n in lengths)
    )


def attention_cells(source: int, limit: int, selection: AttentionSelection, model: ModelConfig) -> int:
    """The most attention weights one output may return: T = limit + 1 queries (EOS included)."""
    heads = model.h if selection.heads is None else len(selection.heads)
    target = limit + 1
    shapes = {
        "cross": (model.n_dec, target * source),
        "encoder": (model.N, source * source),
        "decoder": (model.n_dec, target * target),
    }
    return sum(
        (n if selection.layers is None else len(selection.layers)) * heads * cells
        for kind, (n, cells) in shapes.items()
        if kind in selection.kinds
    )


def check_selection(selection: AttentionSelection, model: ModelConfig) -> None:
    """Layers and heads must exist in every stack asked for."""
    for kind in selection.kinds:
        n = model.N if kind == "encoder" else model.n_dec
        bad = [i for i in selection.layers or () if i >= n]
        if bad:
            raise InvalidRequest(
                "layers", f"{kind} attention has {n} layers (0 to {n - 1}); there is no layer {bad[0]}"
            )
    bad = [i for i in selection.heads or () if i >= model.h]
    if bad:
        raise InvalidRequest("heads", f"each layer has {model.h} heads (0 to {model.h - 1}); there is no head {bad[0]}")


def check_cost(cost: int, limit: int, setting: str, field: str) -> None:
    if cost > limit:
        raise TooCostly(
            field,
            f"this request would cost {cost:,}, more than the limit of {limit:,} ({setting}): "
            "send fewer or shorter texts, or a smaller beam_size or max_length",
        )


def check_cells(cells: int, limit: int) -> None:
    if cells > limit:
        raise TooCostly(
            "q",
            f"the attention maps could hold {cells:,} weights, more than the limit of {limit:,} "
            "(TRANSFORMER_MAX_ATTENTION_CELLS): ask for fewer kinds, layers or heads, or a "
            "smaller max_length",
        )
