"""What a model cannot translate comes through unchanged: URLs, e-mail addresses, numbers, `code spans` and
words with characters the source vocabulary lacks (emoji, a script the model does not read) are taken out of a
sentence before the search, and put back into its output after it, each next to the output word that the
cross-attention aligns with its neighbouring source word (as Bergamot places markup; fairseq's
--print-alignment takes the same argmax). A sentence model fed them drops them or invents words.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from torch import Tensor

KEEP = re.compile(
    r"`[^`\n]{1,200}`"  # a code span (bounded: a line of lone backticks is not scanned again from each one)
    r"|(?:https?://|www\.)[^\s<>\"']*[^\s<>\"'.,;:!?)\]]"  # a URL, without the punctuation that ends a sentence
    r"|(?<![\w.+-])[\w.+-]+@[\w-]+(?:\.[\w-]+)+"  # an e-mail address, tried only where a word starts
    r"|(?<![\w.,-])\d+(?:[.,:/]\d+)*(?![\w-])"  # a number standing alone: 3, 1,024, 2.5, 10:30, 192.168.1.1
)
WORD = re.compile(r"\S+")
EDGE_PUNCTUATION = ".,;:!?()[]\"'«»“”„‘’"
MAX_KEPT = 64  # spans kept per sentence; past them, the rest is left to the model (placing each costs a pass)
# The decoder layer whose cross-attention (mean over heads) links source and output words: a late but not the
# last layer, as alignment work usually takes (the last when N_dec is 1); how well it aligns is not measured here.
ALIGN_LAYER = -2


@dataclass(frozen=True)
class Kept:
    """A span kept as it is: its text, where it was taken out of the text the model reads, and where it is in
    the sentence."""

    at: int
    text: str
    start: int = 0


@dataclass(frozen=True)
class Protected:
    """A sentence as the model reads it (text), and what was taken out of it (kept, in order)."""

    text: str
    kept: tuple[Kept, ...] = ()

    def read_words(self, sentence: str) -> list[tuple[int, int]] | None:
        """The spans in sentence of the words of text, in order (the sentence's words outside its kept spans);
        None when the two do not pair up word for word."""
        kept = [(k.start, k.start + len(k.text)) for k in self.kept]
        outside = [
            m.span() for m in WORD.finditer(sentence) if not any(a <= m.start() and m.end() <= b for a, b in kept)
        ]
        return outside if len(outside) == len(WORD.findall(self.text)) else None

    @property
    def blank(self) -> bool:
        """Nothing is left to translate: the sentence is all kept spans."""
        return not self.text.strip()


def kept_spans(sentence: str, readable: Callable[[str], bool]) -> list[tuple[int, int]]:
    """Spans of sentence to keep: KEEP's, and each word holding a character that is not readable (edge
    punctuation left out), neighbours separated by white space merged."""
    spans = [m.span() for m in KEEP.finditer(sentence)]
    for m in WORD.finditer(sentence):
        if not all(readable(c) for c in m.group()):
            core = m.group().strip(EDGE_PUNCTUATION) or m.group()
            start = m.start() + m.group().index(core)
            spans.append((start, start + len(core)))
    merged: list[tuple[int, int]] = []
    for a, b in sorted(spans):
        if merged and (a <= merged[-1][1] or not sentence[merged[-1][1] : a].strip()):
            merged[-1] = (merged[-1][0], max(b, merged[-1][1]))
        else:
            merged.append((a, b))
    return merged[:MAX_KEPT]


def protect(sentence: str, readable: Callable[[str], bool]) -> Protected:
    """The sentence with its kept spans taken out, the space before each closed up."""
    masked, kept, at = "", [], 0
    for a, b in kept_spans(sentence, readable):
        between = sentence[at:a] if masked else sentence[at:a].lstrip()
        masked = (masked + between).rstrip()
        kept.append(Kept(len(masked), sentence[a:b], a))
        at = b
    rest = sentence[at:]
    return Protected(masked + (rest if masked else rest.lstrip()), tuple(kept))


def restore(protected: Protected, output: str, places: list[int]) -> tuple[str, list[tuple[int, int]], list[int]]:
    """output with each kept span put back at its place (an index into output, one per span), spaced apart
    from the words around it. Also returns where each kept span is in it, and where each index of output
    (its end included) moved to."""
    out, moved = output, list(range(len(output) + 1))
    spans: dict[int, tuple[int, int]] = {}
    for i in sorted(range(len(places)), key=lambda i: places[i], reverse=True):  # ties: in the text's order
        at = moved[places[i]]
        left, right = out[:at], out[at:]
        pad_left = " " if left and not left.endswith((" ", "(", "\n")) else ""
        pad_right = " " if right and not right.startswith((" ", *".,;:!?)")) else ""
        text = protected.kept[i].text
        out = left + pad_left + text + pad_right + right
        grown = len(pad_left) + len(text) + len(pad_right)
        moved = [m + grown if m >= at else m for m in moved]
        spans = {k: (a + grown, b + grown) if a >= at else (a, b) for k, (a, b) in spans.items()}
        spans[i] = (at + len(pad_left), at + len(pad_left) + len(text))
    return out, [spans[i] for i in range(len(places))], moved


def aligned(cross: Tensor) -> list[int]:
    """For each source position, the output position that attends to it most, from cross-attention maps
    (N_dec, h, T, S), EOS rows and columns included."""
    layer = cross[ALIGN_LAYER] if cross.shape[0] > 1 else cross[-1]  # (h, T, S)
    return [int(t) for t in layer.mean(0).argmax(0)]  # (S,)
