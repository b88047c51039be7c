"""Sentence segmentation: a text cut into the sentences a sentence-level model translates well, and their outputs
joined back into the text's shape (the whitespace and line breaks between sentences kept).

Sentences are found by sentencex (Wikimedia's segmenter: rules for some 300 languages with fallbacks between
them, abbreviations, decimals, ellipses and quotes; no model to download). A line break always ends a segment
too, so that lists, titles and UI strings without final punctuation stay apart.
A summarizer reads the whole text: it is one segment.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import sentencex

from model.output import Hypothesis, Output, SentenceSpan, by_rank
from model.tokenizer import check_unicode

Span = tuple[int, int]  # [start, end) in characters
LINE = re.compile(r"[^\n]+")  # a line's text, without its line break
DEFAULT_LANGUAGE = "en"  # the rules for a model whose source language is unknown


@dataclass(frozen=True)
class Segmented:
    """A text and the spans of its sentences in order, the whitespace around each left out."""

    text: str
    spans: tuple[Span, ...]

    @property
    def sentences(self) -> list[str]:
        return [self.text[a:b] for a, b in self.spans]

    def join(self, outputs: Sequence[str]) -> tuple[str, list[Span]]:
        """The text with each sentence replaced by its output, what lies between them kept; and the span of each
        output in it."""
        assert len(outputs) == len(self.spans), "one output per sentence"
        parts: list[str] = []
        spans: list[Span] = []
        at, length = 0, 0  # where the next gap starts in the text, and the joined text's length so far
        for (a, b), out in zip(self.spans, outputs, strict=True):
            gap = self.text[at:a]
            parts += [gap, out]
            length += len(gap)
            spans.append((length, length + len(out)))
            length += len(out)
            at = b
        parts.append(self.text[at:])
        return "".join(parts), spans


def whole(text: str) -> Segmented:
    """The text as one segment, the whitespace around it left out (none for a blank text)."""
    start, end = len(text) - len(text.lstrip()), len(text.rstrip())
    return Segmented(text, ((start, end),) if end > start else ())


def sentences(text: str, language: str | None) -> Segmented:
    """The text's sentences by the rules of language (an ISO 639-1 code; English's when None), each also cut at
    its line breaks."""
    spans: list[Span] = []
    at = 0
    for piece in sentencex.segment(language or DEFAULT_LANGUAGE, text):
        start = text.index(piece, at)  # sentencex's pieces cover the text in order
        for line in LINE.finditer(piece):
            core = line.group().strip()
            if core:
                a = start + line.start() + line.group().index(core)
                spans.append((a, a + len(core)))
        at = start + len(piece)
    return Segmented(text, tuple(spans))


def segment(text: str, language: str | None, task: str) -> Segmented:
    """A translation model's text in sentences; a summarizer's whole. InputError for invalid Unicode."""
    check_unicode(text)
    return sentences(text, language) if task == "translation" else whole(text)


def joined(segmented: Segmented, outputs: Sequence[Output]) -> Output:
    """One Output for a segmented text from its sentences' n-best lists: its k-th hypothesis joins each sentence's
    k-th (the best, where a sentence has fewer), scored by the sum of their scores. A blank text (no sentences)
    comes back as it is."""
    if not segmented.spans:
        return Output([Hypothesis([], 0.0, 0.0, text=segmented.text)])
    hypotheses = []
    for chosen in by_rank([o.hypotheses for o in outputs]):
        text, spans = segmented.join([h.text for h in chosen])
        hypotheses.append(
            Hypothesis(
                ids=[i for h in chosen for i in h.ids],
                score=sum(h.score for h in chosen),
                log_prob=sum(h.log_prob for h in chosen),
                text=text,
                tokens=[t for h in chosen for t in h.tokens],
                attention=next((h.attention for h in chosen if h.attention is not None), None),
                sentences=tuple(SentenceSpan(s, o) for s, o in zip(segmented.spans, spans, strict=True)),
                alignment=tuple(
                    (a + s[0], b + s[0], c + o[0], d + o[0])
                    for h, s, o in zip(chosen, segmented.spans, spans, strict=True)
                    for a, b, c, d in h.alignment
                ),
            )
        )
    return Output(hypotheses)


def sections(text: str, language: str | None, length: Callable[[str], int], limit: int) -> list[str]:
    """A document too long for a model in sections of whole sentences, each of at most limit tokens by length
    (a sentence longer than that alone is a section of its own, which the model cuts), in order."""
    out: list[str] = []
    current: list[str] = []
    used = 0
    for sentence in sentences(text, language).sentences:
        n = length(sentence)
        if current and used + n > limit:
            out.append(" ".join(current))
            current, used = [], 0
        current.append(sentence)
        used += n
    if current:
        out.append(" ".join(current))
    return out
