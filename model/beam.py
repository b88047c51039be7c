"""Batched beam search over many sentences at once (§6.1); finished sentences leave the batch."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from model.cache import DecoderCache
from model.config import DecodingConfig
from model.tokenizer import SpecialIds
from model.transformer import Transformer


@dataclass(frozen=True)
class Hypothesis:
    """One finished output: its ids (without EOS), log P / lp(|Y|), and log P itself."""

    tokens: list[int]
    score: float
    log_prob: float


def length_limits(src_mask: Tensor, cfg: DecodingConfig, model_max_len: int) -> list[int]:
    """Longest output per sentence: a * |source| + b tokens (EOS not counted), within the model's positions."""
    src_len = src_mask.sum(dim=1).tolist()
    return [min(int(cfg.max_len_a * n + cfg.max_len_b), model_max_len - 1) for n in src_len]


@dataclass
class _Beams:
    """The live search state of the sentences still in the batch."""

    alive: list[int]  # batch index of each sentence still searched
    max_len: list[int]  # output limit of each of them
    history: Tensor  # (R, t + 1) ids so far, starting with the decoder start symbol
    scores: Tensor  # (B, beams) summed log-probabilities
    cache: DecoderCache


@torch.inference_mode()
def beam_search(model: Transformer, src: Tensor, src_mask: Tensor, cfg: DecodingConfig,
                special: SpecialIds) -> list[list[Hypothesis]]:
    """The n_best hypotheses of each source sentence, best first. src, src_mask: (B, S)."""
    memory, _ = model.encode(src, src_mask)
    B = src.size(0)
    limits = length_limits(src_mask, cfg, model.cfg.max_len)
    state = _Beams(
        alive=list(range(B)), max_len=limits,
        history=torch.full((B, 1), special.decoder_start, dtype=torch.long, device=src.device),
        scores=torch.zeros(B, 1, device=src.device), cache=model.start_cache(memory, src_mask, max(limits)),
    )
    finished: list[list[Hypothesis]] = [[] for _ in range(B)]
    banned = torch.tensor(sorted(set(cfg.banned_ids) | set(special.never_generated)), device=src.device)
    for step in range(max(*limits, 1)):
        logits, state.cache = model.step(state.history[:, -1], state.cache)
        logp = torch.log_softmax(logits.float(), dim=-1)  # (R, V)
        eos_logp = logp[:, special.eos].clone() if step == 0 and 0 in limits else None
        constrain(logp, state.history, step, cfg, special.eos, banned)
        if eos_logp is not None:  # a limit of 0 tokens leaves only EOS (rows are sentences at step 0)
            empty = torch.tensor([n == 0 for n in limits], device=logp.device)
            logp[empty] = -math.inf
            logp[empty, special.eos] = eos_logp[empty]
        state = _advance(state, logp, step, cfg, special.eos, finished)
        if not state.alive:
            break
    return [sorted(hyps, key=lambda hyp: -hyp.score)[:cfg.n_best] for hyps in finished]


def constrain(logp: Tensor, history: Tensor, step: int, cfg: DecodingConfig, eos: int, banned: Tensor) -> None:
    """Ban ids in place: never-generated ids, EOS before min_length, repeated n-grams."""
    logp[:, banned] = -math.inf
    if step < cfg.min_length:
        logp[:, eos] = -math.inf
    if cfg.no_repeat_ngram_size:
        ban_repeated_ngrams(logp, history, cfg.no_repeat_ngram_size)


def ban_repeated_ngrams(logp: Tensor, history: Tensor, n: int) -> None:
    """Forbid any id that would repeat an n-gram already in a hypothesis (start symbol included)."""
    if history.size(1) < n:
        return
    windows = history.unfold(1, n, 1)  # (R, t + 2 - n, n)
    prefix = history[:, history.size(1) - n + 1:]  # (R, n - 1), the last n - 1 ids
    match = (windows[:, :, :-1] == prefix[:, None, :]).all(dim=-1)  # (R, t + 2 - n)
    rows, cols = match.nonzero(as_tuple=True)
    logp[rows, windows[rows, cols, -1]] = -math.inf


def _advance(state: _Beams, logp: Tensor, step: int, cfg: DecodingConfig, eos: int,
             finished: list[list[Hypothesis]]) -> _Beams:
    """One search step: end hypotheses (on EOS, or all at the length limit), keep the best k that go on,
    drop the sentences whose search is over."""
    B, beams = state.scores.shape
    V, k = logp.size(-1), cfg.beam_size
    candidates = (state.scores[:, :, None] + logp.view(B, beams, V)).view(B, beams * V)
    top, index = candidates.topk(min(2 * k, beams * V), dim=1)  # (B, 2k), best first
    source_row = index // V + torch.arange(B, device=logp.device)[:, None] * beams  # (B, 2k)
    token = index % V
    is_eos = token == eos
    # The k best candidates that do not end go on (a stable sort keeps their rank order).
    go_on = torch.sort(is_eos.to(torch.int8), dim=1, stable=True).indices[:, :k]  # (B, k)
    scores, rows, next_token = top.gather(1, go_on), source_row.gather(1, go_on), token.gather(1, go_on)
    # One transfer to the host per step: the k best candidates and the best score going on.
    host = torch.cat([top[:, :k].double(), token[:, :k].double(), source_row[:, :k].double(),
                      scores[:, :1].double()], dim=1).tolist()  # (B, 3k + 1)
    keep = _finish(state, host, step, cfg, eos, finished)
    if not keep:
        return _Beams([], [], state.history[:0], scores[:0], state.cache)
    if len(keep) < B:
        kept = torch.tensor(keep, device=logp.device)
        scores, rows, next_token = scores[kept], rows[kept], next_token[kept]
    rows = rows.flatten()
    return _Beams(
        alive=[state.alive[b] for b in keep], max_len=[state.max_len[b] for b in keep],
        history=torch.cat([state.history.index_select(0, rows), next_token.reshape(-1, 1)], dim=1),
        scores=scores, cache=state.cache.reorder(rows, beams=k),
    )


def _finish(state: _Beams, host: list[list[float]], step: int, cfg: DecodingConfig, eos: int,
            finished: list[list[Hypothesis]]) -> list[int]:
    """Record the hypotheses that end at this step; return the batch rows of sentences that go on.

    Among the k best candidates, those ending in EOS are finished; at a sentence's length limit
    every one of them is (as CTranslate2 and transformers do, without forcing an EOS).
    """
    k = cfg.beam_size
    ending: list[tuple[int, int, float, int]] = []  # (sentence, last token, log P, source row)
    for b, row in enumerate(host):
        at_limit = step + 1 >= state.max_len[b]
        for r in range(k):
            if math.isfinite(row[r]) and (row[k + r] == eos or at_limit):
                ending.append((b, int(row[k + r]), row[r], int(row[2 * k + r])))
    if ending:
        histories = state.history[[e[3] for e in ending]].tolist()
        for (b, last, log_prob, _), history in zip(ending, histories, strict=True):
            ids = history[1:] + ([] if last == eos else [last])
            length = len(ids) + (last == eos)  # |Y| counts the EOS when there is one
            finished[state.alive[b]].append(Hypothesis(ids, log_prob / cfg.length_penalty_of(length), log_prob))
    return [b for b in range(len(host)) if not _is_done(state, b, host[b][3 * k], step, cfg, finished)]


def _is_done(state: _Beams, b: int, best_live: float, step: int, cfg: DecodingConfig,
             finished: list[list[Hypothesis]]) -> bool:
    """Whether sentence b needs no more steps: at its limit, out of candidates, or unbeatable."""
    hyps = finished[state.alive[b]]
    if step + 1 >= state.max_len[b] or not math.isfinite(best_live):
        return True
    if len(hyps) < cfg.beam_size:
        return False
    if cfg.early_stopping:
        return True
    # Otherwise stop once no live hypothesis can beat the k-th best finished one (tensor2tensor's
    # test): log P only falls, so its best normalised score is at the longest (alpha > 0) or shortest length.
    worst = sorted(h.score for h in hyps)[-cfg.beam_size]
    length = state.max_len[b] if cfg.length_penalty > 0 else step + 2
    return best_live / cfg.length_penalty_of(length) <= worst
