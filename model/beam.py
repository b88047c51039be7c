"""Batched beam search (§6.1) as a loop that sentences join and leave at every step (continuous batching).

Each sentence carries its own options (length penalty, output limit, min length, no-repeat size, n-best);
only the beam size is shared by the sentences of one loop.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

import torch
from torch import Tensor

from model.cache import JOIN_ROOM, DecoderCache
from model.config import DecodingConfig
from model.errors import SearchStopped
from model.masks import pad_batch
from model.output import Hypothesis
from model.tokenizer import SpecialIds
from model.transformer import Transformer

K = TypeVar("K")  # a running search's name (Admission.fits)


@dataclass
class Sentence:
    """One source sentence in the loop: its options, output limit, steps so far and ended hypotheses."""

    tag: Hashable  # the caller's name for it
    cfg: DecodingConfig
    limit: int  # most output tokens, EOS not counted
    source_length: int
    step: int = 0  # tokens decoded so far
    ended: list[Hypothesis] = field(default_factory=list)

    def n_best(self) -> list[Hypothesis]:
        return sorted(self.ended, key=lambda hyp: -hyp.score)[: self.cfg.n_best]


@dataclass(frozen=True)
class Candidates:
    """The k best candidates of every sentence at one step, on the host: the one transfer per step, unpacked."""

    log_prob: list[list[float]]  # (B, k) summed log P, best first
    token: list[list[int]]  # (B, k) the id each one adds
    row: list[list[int]]  # (B, k) the hypothesis (row) each one extends
    best_going_on: list[float]  # (B,) log P of the best candidate that does not end

    @staticmethod
    def of(top: Tensor, token: Tensor, row: Tensor, going_on: Tensor, k: int) -> Candidates:
        host = torch.cat(
            [top[:, :k].double(), token[:, :k].double(), row[:, :k].double(), going_on[:, :1].double()], dim=1
        ).tolist()  # (B, 3k + 1)
        return Candidates(
            log_prob=[r[:k] for r in host],
            token=[[int(x) for x in r[k : 2 * k]] for r in host],
            row=[[int(x) for x in r[2 * k : 3 * k]] for r in host],
            best_going_on=[r[3 * k] for r in host],
        )


@dataclass(frozen=True)
class _Best:
    """A step's best candidates on the device: the 2k best of each sentence, (B, 2k) log P, ids and the rows
    they extend; and the k best that do not end, (B, k)."""

    top: Tensor
    token: Tensor
    row: Tensor
    go_on_log_prob: Tensor
    go_on_row: Tensor
    go_on_token: Tensor


class BeamLoop:
    """The live rows of a beam search with beam size k: k rows per sentence, in the order the sentences
    joined (their cross-attention slots may be in another).

    admit() encodes new sentences and adds their rows; step() decodes one token for every row and returns
    the sentences that finished; drop() removes sentences nobody waits for.
    """

    def __init__(
        self, model: Transformer, special: SpecialIds, beam_size: int, max_sentences: int | None = None
    ) -> None:
        self.model, self.special, self.k = model, special, beam_size
        self.max_sentences = max_sentences  # the most the caller admits at once: no cache room is made past it
        weight = next(model.parameters())
        self.device, self.dtype = weight.device, torch.promote_types(weight.dtype, torch.float32)  # of log P
        self.sentences: list[Sentence] = []
        self.cache: DecoderCache | None = None
        self.history = torch.empty(0, 1, dtype=torch.long, device=self.device)  # (R, columns) ids, left-aligned
        self.scores = torch.empty(0, beam_size, device=self.device, dtype=self.dtype)  # (B, k) summed log P
        self.never = torch.tensor(sorted(set(special.never_generated)), device=self.device)

    def __len__(self) -> int:
        return len(self.sentences)

    @property
    def source_length(self) -> int:
        """The padded source length every row attends over."""
        return max((s.source_length for s in self.sentences), default=0)

    @torch.inference_mode()
    def admit(self, sources: Sequence[Sequence[int]], cfgs: Sequence[DecodingConfig], tags: Sequence[Hashable]) -> None:
        """Add sentences (source ids, each with its options and tag); they take part from the next step."""
        if not sources:
            return
        assert all(cfg.beam_size == self.k for cfg in cfgs), "a loop holds one beam size"
        src, mask = pad_batch(sources, self.special.pad, self.device)
        memory, _ = self.model.encode(src, mask)
        limits = [cfg.output_limit(len(ids), self.model.cfg.max_len) for ids, cfg in zip(sources, cfgs, strict=True)]
        # Joining sentences take free rows of the running cache's buffers: their own start with no room.
        capacity = min(max(limits) + 1, JOIN_ROOM) if self.cache is None else 0  # grows as needed
        new = self.model.start_cache(memory, mask, capacity=capacity, beams=self.k, src=src)
        B = len(sources)
        history = torch.full((B * self.k, 1), self.special.decoder_start, dtype=torch.long, device=self.device)
        scores = torch.full((B, self.k), -math.inf, device=self.device, dtype=self.dtype)
        scores[:, 0] = 0.0  # one live hypothesis per new sentence: its other beams start at log P = -inf
        self.cache = new if self.cache is None else self.cache.joined(new, self.max_sentences)
        columns = max(self.history.size(1), 1)
        self.history = torch.cat([self.history, _widen(history, columns)])
        self.scores = torch.cat([self.scores, scores])
        self.sentences += [
            Sentence(tag, cfg, limit, len(ids))
            for ids, cfg, limit, tag in zip(sources, cfgs, limits, tags, strict=True)
        ]

    @torch.inference_mode()
    def step(self) -> list[Sentence]:
        """Decode one token for every row; return the sentences whose search ended, removed from the loop."""
        assert self.cache is not None and self.sentences, "step() needs sentences"
        positions = max(s.limit for s in self.sentences)  # a sentence writes one position a step, limit steps at most
        logits, self.cache = self.model.step(self._latest(), self.cache, positions)
        logp = torch.log_softmax(logits.to(self.dtype), dim=-1)  # (R, V)
        self._constrain(logp)
        best = self._candidates(logp)
        done = self._record_ended(Candidates.of(best.top, best.token, best.row, best.go_on_log_prob, self.k))
        ended = [self.sentences[b] for b in sorted(done)]
        keep = survivors(len(self.sentences), done)
        row, token, log_prob = best.go_on_row, best.go_on_token, best.go_on_log_prob  # (B, k) each
        if done:
            index = torch.tensor(keep, dtype=torch.long, device=self.device)
            row, token, log_prob = (x.index_select(0, index) for x in (row, token, log_prob))
        self._keep(keep, row.flatten(), token.flatten(), log_prob)
        for s in self.sentences:
            s.step += 1
        return ended

    @torch.inference_mode()
    def drop(self, tags: set[Hashable]) -> list[Sentence]:
        """Remove the sentences with these tags; returns them."""
        keep = survivors(len(self.sentences), {b for b, s in enumerate(self.sentences) if s.tag in tags})
        gone = [s for s in self.sentences if s.tag in tags]
        if gone:
            rows = torch.arange(len(self.sentences) * self.k, device=self.device).view(-1, self.k)[keep].flatten()
            self._keep(keep, rows, None, self.scores[keep])
        return gone

    def _columns(self, steps: list[int]) -> int | Tensor:
        """Each row's history column for these per-sentence steps: one column when all sentences are equally
        far (a plain slice), else (R,) columns."""
        if min(steps) == max(steps):
            return steps[0]
        return torch.tensor(steps, device=self.device).repeat_interleave(self.k)  # (R,)

    def _latest(self) -> Tensor:
        """(R,) each row's latest id."""
        at = self._columns([s.step for s in self.sentences])
        return self.history[:, at] if isinstance(at, int) else self.history.gather(1, at[:, None])[:, 0]

    def _constrain(self, logp: Tensor) -> None:
        """Ban ids in place: never-generated and banned ids, EOS before min_length, repeated n-grams; a limit of
        0 tokens leaves only EOS."""
        eos, k = self.special.eos, self.k
        empty = [b for b, s in enumerate(self.sentences) if s.limit == 0 and s.step == 0]
        eos_logp = logp[:, eos].clone() if empty else None
        logp.index_fill_(1, self.never, -math.inf)
        for b, s in enumerate(self.sentences):
            if s.cfg.banned_ids:
                logp[b * k : (b + 1) * k, list(s.cfg.banned_ids)] = -math.inf
        early = [r for b, s in enumerate(self.sentences) if s.step < s.cfg.min_length for r in range(b * k, b * k + k)]
        if early:
            logp[early, eos] = -math.inf
        groups: dict[tuple[int, int], list[int]] = {}  # (n, step) -> rows
        for b, s in enumerate(self.sentences):
            if s.cfg.no_repeat_ngram_size:
                groups.setdefault((s.cfg.no_repeat_ngram_size, s.step), []).extend(range(b * k, b * k + k))
        for (n, step), group in groups.items():
            index = torch.tensor(group, device=self.device)
            rows, ids = repeated_ngrams(self.history.index_select(0, index)[:, : step + 1], n)
            logp[index[rows], ids] = -math.inf
        self._force_prefix(logp)
        if eos_logp is not None:  # rows are sentences' beams: only the first is live at step 0
            rows_of = torch.tensor([r for b in empty for r in range(b * k, b * k + k)], device=self.device)
            logp[rows_of] = -math.inf
            logp[rows_of, eos] = eos_logp[rows_of]

    def _force_prefix(self, logp: Tensor) -> None:
        """Within a sentence's target_prefix, its next id is the only one, with log P 0."""
        forced = [
            (b, s.cfg.target_prefix[s.step]) for b, s in enumerate(self.sentences) if s.step < len(s.cfg.target_prefix)
        ]
        if forced:
            k = self.k
            rows = torch.tensor([r for b, _ in forced for r in range(b * k, b * k + k)], device=self.device)
            ids = torch.tensor([i for _, i in forced], device=self.device).repeat_interleave(k)  # (rows,)
            logp[rows] = -math.inf
            logp[rows, ids] = 0.0

    def _candidates(self, logp: Tensor) -> _Best:
        """Each sentence's 2k best candidates, and of them the k best that do not end."""
        B, k, V = len(self.sentences), self.k, logp.size(-1)
        candidates = (self.scores[:, :, None] + logp.view(B, k, V)).view(B, k * V)
        top, index = candidates.topk(min(2 * k, k * V), dim=1)  # (B, 2k), best first
        row = index // V + torch.arange(B, device=logp.device)[:, None] * k  # (B, 2k)
        token = index % V
        # The k best candidates that do not end go on (a stable sort keeps their rank order).
        go_on = torch.sort((token == self.special.eos).to(torch.int8), dim=1, stable=True).indices[:, :k]  # (B, k)
        return _Best(top, token, row, top.gather(1, go_on), row.gather(1, go_on), token.gather(1, go_on))

    def _record_ended(self, found: Candidates) -> set[int]:
        """Record the hypotheses that end at this step; return the sentences whose search is over.

        Among the k best candidates, those ending in EOS are finished; at a sentence's length limit
        every one of them is (as CTranslate2 and transformers do, without forcing an EOS).
        """
        k, eos = self.k, self.special.eos
        ending: list[tuple[int, int, float, int]] = []  # (sentence, last token, log P, source row)
        for b, s in enumerate(self.sentences):
            at_limit = s.step + 1 >= s.limit
            for r in range(k):
                if math.isfinite(found.log_prob[b][r]) and (found.token[b][r] == eos or at_limit):
                    ending.append((b, found.token[b][r], found.log_prob[b][r], found.row[b][r]))
        if ending:
            histories = self.history[[e[3] for e in ending]].tolist()
            for (b, last, log_prob, _), history in zip(ending, histories, strict=True):
                s = self.sentences[b]
                forced = len(s.cfg.target_prefix)  # left out of the hypothesis, counted in |Y|
                ids = history[1 + forced : s.step + 1] + ([] if last == eos else [last])
                length = forced + len(ids) + (last == eos)  # |Y| counts the EOS when there is one
                s.ended.append(Hypothesis(ids, log_prob / s.cfg.length_penalty_of(length), log_prob))
        return {b for b, s in enumerate(self.sentences) if is_done(s, found.best_going_on[b])}

    def _keep(self, keep: list[int], rows: Tensor, next_token: Tensor | None, scores: Tensor) -> None:
        """Go on with sentences `keep` and hypotheses `rows` (k per sentence), each extended by next_token."""
        assert self.cache is not None
        self.sentences = [self.sentences[b] for b in keep]
        history = self.history.index_select(0, rows)
        self.scores = scores
        if not keep:
            self.cache, self.history = None, history[:, :1]
            return
        if next_token is not None:
            steps = [s.step + 1 for s in self.sentences]
            history = _widen(history, max(steps) + 1)
            at = self._columns(steps)
            if isinstance(at, int):
                history[:, at] = next_token
            else:
                history.scatter_(1, at[:, None], next_token[:, None])
        self.history = history
        self.cache = self.cache.reorder(rows, kept=keep).trimmed(self.source_length)


def survivors(count: int, gone: set[int]) -> list[int]:
    """The sentences 0 .. count - 1 not in gone, in their order (join order, so that lengths fall along
    the rows: see model.cache.row_spans)."""
    return [b for b in range(count) if b not in gone]


def _widen(history: Tensor, columns: int) -> Tensor:
    """history with at least `columns` columns (new ones hold 0), doubling to keep appends cheap."""
    if history.size(1) >= columns:
        return history
    wider = history.new_zeros(history.size(0), max(columns, 2 * history.size(1)))
    wider[:, : history.size(1)] = history
    return wider


def is_done(s: Sentence, best_going_on: float) -> bool:
    """Whether sentence s needs no more steps: at its limit, out of candidates, or (by its stopping rule) done."""
    cfg = s.cfg
    if s.step + 1 >= s.limit or not math.isfinite(best_going_on):
        return True
    if len(s.ended) < cfg.beam_size:
        return False
    if cfg.early_stopping:
        return True
    # The exact bound: stop once no live hypothesis can beat the beam_size-th best ended one (tensor2tensor's
    # test). log P only falls, so its best normalised score is at the longest (alpha > 0) or shortest length.
    worst = sorted(h.score for h in s.ended)[-cfg.beam_size]
    length = s.limit if cfg.length_penalty > 0 else s.step + 2
    return best_going_on / cfg.length_penalty_of(length) <= worst


def repeated_ngrams(history: Tensor, n: int) -> tuple[Tensor, Tensor]:
    """(rows, ids) that would repeat an n-gram already in a hypothesis (start symbol included).
    history: (R, t + 1) ids so far."""
    if history.size(1) < n:
        empty = history.new_empty(0)
        return empty, empty
    windows = history.unfold(1, n, 1)  # (R, t + 2 - n, n)
    prefix = history[:, history.size(1) - n + 1 :]  # (R, n - 1), the last n - 1 ids
    match = (windows[:, :, :-1] == prefix[:, None, :]).all(dim=-1)  # (R, t + 2 - n)
    rows, cols = match.nonzero(as_tuple=True)
    return rows, windows[rows, cols, -1]


@torch.inference_mode()
def beam_search(
    model: Transformer,
    src: Tensor,
    src_mask: Tensor,
    cfg: DecodingConfig,
    special: SpecialIds,
    stop: Callable[[], bool] | None = None,
) -> list[list[Hypothesis]]:
    """The n_best hypotheses of each source sentence, best first. src, src_mask: (B, S).

    stop, if given, is asked before every step; when it answers True the search raises SearchStopped.
    """
    lengths = src_mask.sum(dim=1).tolist()
    sources = [row[:n] for row, n in zip(src.tolist(), lengths, strict=True)]
    return search_all(model, sources, [cfg] * len(sources), special, stop)


def search_all(
    model: Transformer,
    sources: Sequence[Sequence[int]],
    cfgs: Sequence[DecodingConfig],
    special: SpecialIds,
    stop: Callable[[], bool] | None = None,
) -> list[list[Hypothesis]]:
    """Every sentence admitted at once (each with its own options, one beam size), searched to the end."""
    results: dict[Hashable, list[Hypothesis]] = {}
    if not sources:
        return []
    loop = BeamLoop(model, special, cfgs[0].beam_size)
    loop.admit(sources, cfgs, list(range(len(sources))))
    step = 0
    while loop:
        if stop is not None and stop():
            raise SearchStopped(f"stopped at step {step}")
        for s in loop.step():
            results[s.tag] = s.n_best()
        step += 1
    return [results[i] for i in range(len(sources))]


class Admission:
    """Which waiting sources join running searches, and when (continuous batching).

    The searches together hold at most max_sentences sentences and max_tokens source tokens, each search
    counting its padding: its sentences times its longest source (fits). Encoding costs about as much for one
    source as for several, so sources join a busy search a few at a time (due): once `together` of them can, as
    many waiting and as many rows free. With every source waiting from the start (wait_steps None: offline
    translation), the last few join as soon as they all fit; with sources arriving while the search runs (the
    service), fewer than `together` join after wait_steps steps."""

    def __init__(self, max_sentences: int, max_tokens: int, together: int, wait_steps: int | None) -> None:
        self.max_sentences, self.max_tokens = max_sentences, max_tokens
        self.together, self.wait_steps = max(1, together), wait_steps
        self.deferred = 0  # steps since waiting sources could have joined

    def due(self, running: int, waiting: int) -> bool:
        """Whether waiting sources join now, with `running` sentences in the searches (a step is counted when not)."""
        free = self.max_sentences - running
        if self.wait_steps is None:
            return waiting > 0 and (running == 0 or free >= min(waiting, self.together))
        if running and min(waiting, free) < self.together and self.deferred < self.wait_steps:
            self.deferred += 1
            return False
        self.deferred = 0
        return True

    def fits(self, held: dict[K, tuple[int, int]], search: K, length: int) -> bool:
        """Whether a source of `length` tokens fits in `search`, given what each search holds, (sentences, longest
        source); if it does, it is counted in held."""
        n, longest = held.get(search, (0, 0))
        longest = max(longest, length)
        count = sum(a for a, _ in held.values())
        others = sum(a * b for key, (a, b) in held.items() if key != search)
        if count + 1 > self.max_sentences or (count and others + (n + 1) * longest > self.max_tokens):
            return False
        held[search] = (n + 1, longest)
        return True
