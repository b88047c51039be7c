"""What a search gives back: hypotheses (§6.1), the n-best list of one input, and attention maps when asked for.

One type each, from the search to the service's queue: the beam search makes a Hypothesis of ids and scores,
the Translator reads its text and tokens into the same type (Translator.read), and the service carries Outputs
to its HTTP layer, where they become the API's bodies.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from torch import Tensor

AttentionKind = Literal["cross", "encoder", "decoder"]
ATTENTION_KINDS: tuple[AttentionKind, ...] = get_args(AttentionKind)
DECODER_START = "(start)"  # the decoder's first input, before any output token, as a key's label


@dataclass(frozen=True)
class AttentionMaps:
    """Attention of one hypothesis; every tensor is (layers, h, queries, keys) on the CPU, in float32."""

    source_tokens: list[str]  # source pieces, ending in EOS
    target_tokens: list[str]  # output pieces, ending in EOS
    cross: Tensor  # (N_dec, h, T, S): each output token over the source (§3.2.3)
    encoder: Tensor | None = None  # (N, h, S, S)
    decoder: Tensor | None = None  # (N_dec, h, T, T), causal

    def of(self, kind: AttentionKind) -> Tensor | None:
        """The maps of one kind: cross (encoder-decoder), encoder or decoder self-attention."""
        maps: Tensor | None = getattr(self, kind)
        return maps

    def labels(self, kind: AttentionKind) -> tuple[list[str], list[str]]:
        """The query (row) and key (column) tokens of kind's maps. The decoder's keys are its inputs: the start
        symbol, then the output so far."""
        if kind == "cross":
            return self.target_tokens, self.source_tokens
        if kind == "encoder":
            return self.source_tokens, self.source_tokens
        return self.target_tokens, [DECODER_START, *self.target_tokens[:-1]]


@dataclass(frozen=True)
class SentenceSpan:
    """Where one sentence of a segmented text is (model.segment), and where its output is in the joined output:
    [start, end) in characters."""

    source: tuple[int, int]
    output: tuple[int, int]


@dataclass(frozen=True)
class Hypothesis:
    """One output of the search: its ids (EOS left out), score log P / lp(|Y|) and log P (§6.1, §7).

    The search knows ids only; Translator.read adds the text and its tokens (pieces), and, when asked for,
    the attention maps."""

    ids: list[int]
    score: float
    log_prob: float
    text: str = ""
    tokens: list[str] = field(default_factory=list)
    attention: AttentionMaps | None = None
    sentences: tuple[SentenceSpan, ...] = ()  # of a text joined from its sentences' outputs (model.segment)
    # When asked for: (source start, end, output start, end) of each source word and the output word aligned
    # with it (Translator.read), in characters of the text and of this output
    alignment: tuple[tuple[int, int, int, int], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON values, attention left out (tensors)."""
        return {
            "text": self.text,
            "tokens": self.tokens,
            "score": self.score,
            "log_prob": self.log_prob,
            "ids": self.ids,
            "sentences": [[*s.source, *s.output] for s in self.sentences],
            "alignment": [list(a) for a in self.alignment],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Hypothesis:
        return cls(
            ids=list(data["ids"]),
            score=float(data["score"]),
            log_prob=float(data["log_prob"]),
            text=str(data["text"]),
            tokens=list(data["tokens"]),
            sentences=tuple(SentenceSpan((a, b), (c, d)) for a, b, c, d in data.get("sentences", ())),
            alignment=tuple((a, b, c, d) for a, b, c, d in data.get("alignment", ())),
        )


def by_rank(lists: list[list[Hypothesis]]) -> list[list[Hypothesis]]:
    """The k-th hypothesis of each n-best list, for k = 0, 1, ... up to the longest list (a list's best where it
    has fewer): the parts of the k-th hypothesis of an output joined from several (one empty row for no lists)."""
    return [[r[k] if k < len(r) else r[0] for r in lists] for k in range(max((len(r) for r in lists), default=1))]


@dataclass(frozen=True)
class Output:
    """The n-best list of one input, best first; text, tokens, score and attention are the best one's."""

    hypotheses: list[Hypothesis]

    @property
    def best(self) -> Hypothesis:
        return self.hypotheses[0]

    @property
    def text(self) -> str:
        return self.best.text

    @property
    def tokens(self) -> list[str]:
        return self.best.tokens

    @property
    def score(self) -> float:
        return self.best.score

    @property
    def attention(self) -> AttentionMaps | None:
        return self.best.attention

    @classmethod
    def as_it_is(cls, text: str) -> Output:
        """The output of a text already in the target language, read by no model: the text, no ids, score 0."""
        return cls([Hypothesis(ids=[], score=0.0, log_prob=0.0, text=text)])

    def to_dict(self) -> dict[str, Any]:
        return {"hypotheses": [h.to_dict() for h in self.hypotheses]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Output:
        return cls([Hypothesis.from_dict(h) for h in data["hypotheses"]])
