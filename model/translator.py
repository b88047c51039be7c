"""The Translator API, in CTranslate2's style: load a checkpoint, translate batches of text."""

from __future__ import annotations

import ctypes
import dataclasses
import itertools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from model.beam import Admission, BeamLoop, search_all
from model.checkpoint import CheckpointMeta, load_checkpoint, read_meta
from model.config import DTYPE_NAMES, DecodingConfig, ModelConfig
from model.errors import ConfigError, InputError, InputTooLongError
from model.int8_checkpoint import load_int8_checkpoint
from model.output import AttentionMaps, Hypothesis, Output
from model.protect import EDGE_PUNCTUATION, WORD, Protected, aligned, protect, restore
from model.quantize import check_int8, quantize_transformer
from model.segment import Segmented, joined, segment, whole
from model.tokenizer import NO_LANGUAGES, Languages, Tokenizer
from model.transformer import Transformer

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def check_device(device: str) -> None:
    """ConfigError unless device is cpu, or cuda[:N] with that GPU present."""
    try:
        d = torch.device(device)
    except RuntimeError:
        raise ConfigError(f"device must be cpu, cuda or cuda:N, got {device!r}") from None
    if d.type not in ("cpu", "cuda"):
        raise ConfigError(f"device must be cpu, cuda or cuda:N, got {device!r}")
    if d.type == "cuda" and not torch.cuda.is_available():
        why = "this torch build has no CUDA" if torch.version.cuda is None else "no GPU is visible"
        raise ConfigError(f"device {device}: CUDA is not available here ({why}); use cpu")
    if d.type == "cuda" and d.index is not None and d.index >= torch.cuda.device_count():
        raise ConfigError(f"device {device}: there are {torch.cuda.device_count()} GPUs (cuda:0 ...)")


def trim_heap() -> None:
    """Give the heap's free pages back to the system: loading frees the float weights that packing or quantizing
    replaced, which the allocator would otherwise keep resident (1.35 GB of an NLLB-600M-shaped model's with
    glibc's malloc). glibc's malloc_trim, and tcmalloc's or jemalloc's own release where the process runs on one
    (the service's worker processes: service.allocator); each a no-op where its allocator is absent."""
    process = ctypes.CDLL(None)  # the symbols of every library loaded, a preloaded allocator's included
    release = getattr(process, "MallocExtension_ReleaseFreeMemory", None)  # tcmalloc
    if release is not None:
        release()
    mallctl = getattr(process, "mallctl", None)  # jemalloc: purge every arena (MALLCTL_ARENAS_ALL, 4096)
    if mallctl is not None:
        mallctl(b"arena.4096.purge", None, None, None, ctypes.c_size_t(0))
    malloc_trim = getattr(process, "malloc_trim", None)
    if malloc_trim is not None:
        malloc_trim(0)


@dataclass(frozen=True)
class Source:
    """One segment of a text as the model reads it: the sentence with what cannot be translated kept out
    (model.protect), and its source ids (none when nothing is left to translate)."""

    protected: Protected
    ids: list[int]
    sentence: str = ""
    languages: Languages = NO_LANGUAGES  # the language ids its source starts with and its output is forced to

    def kept_whole(self) -> Output:
        """The output of a segment that is all kept spans: itself."""
        text = " ".join(k.text for k in self.protected.kept)
        return Output([Hypothesis([], 0.0, 0.0, text=text, alignment=((0, len(self.sentence), 0, len(text)),))])


def read_segments(
    texts: Sequence[Segmented],
    tokenizer: Tokenizer,
    cfg: ModelConfig,
    truncate: bool,
    languages: Languages = NO_LANGUAGES,
) -> list[Source]:
    """Every segment of every text, in order, as the model reads it: what cannot be translated kept out of it
    (model.protect), then encoded as Translator.encode does (no ids when nothing is left), after the
    languages' source ids. The API checks a request with it, without the weights (service.registry)."""
    out = []
    for i, text in enumerate(texts):
        for j, sentence in enumerate(text.sentences):
            protected = protect(sentence, tokenizer.readable)
            try:
                ids = [] if protected.blank else tokenizer.source_ids(protected.text, cfg, truncate, languages.source)
            except InputTooLongError as e:
                raise InputTooLongError(e.length, e.limit, i, j if len(text.spans) > 1 else None) from None
            out.append(Source(protected, ids, sentence, languages))
    return out


def word_index(pieces: list[str], mark: str = "▁") -> list[int]:
    """For each piece, the index of the word it belongs to (a piece starting with the mark starts one: ▁ for
    SentencePiece, Ġ for byte-level BPE)."""
    out, word = [], -1
    for p in pieces:
        word += p.startswith(mark) or word < 0
        out.append(word)
    return out


def word_starts(pieces: list[str], mark: str = "▁") -> list[int]:
    """The index of each word's first piece."""
    index = word_index(pieces, mark)
    return [i for i, w in enumerate(index) if i == 0 or w != index[i - 1]]


def check_texts(texts: Sequence[str]) -> Sequence[str]:
    """InputError unless texts is a list of strings."""
    if isinstance(texts, str):
        raise InputError("texts must be a list of strings, not one string")
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise InputError(f"input {i} is {type(text).__name__}, not a string")
    return texts


class Translator:
    """Batched beam-search translation (or summarization) with one loaded checkpoint."""

    def __init__(self, model: Transformer, tokenizer: Tokenizer, meta: CheckpointMeta) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.meta = meta

    @classmethod
    def load(
        cls,
        path: str | Path,
        device: str | None = None,
        dtype: str = "auto",
        threads: int | None = None,
        pack: bool = True,
    ) -> Translator:
        """Load a checkpoint directory onto device (default: CUDA when available), dtype float32 on CPU
        and bfloat16 on CUDA unless given, or int8 on the CPU (model.quantize: weights quantized at load, or
        read from an int8 checkpoint, which auto loads as int8);
        threads fixes the number of CPU threads; pack pre-packs the float32 linear weights for the CPU
        (model.packing: faster, same arithmetic), keeping only the packed copies of the linear weights."""
        int8_file = read_meta(path).weights == "int8"  # an int8 checkpoint (`transformer quantize`)
        if int8_file:
            if dtype not in ("auto", "int8"):
                raise ConfigError(
                    f"{path} holds int8 weights (written by `transformer quantize`): load it with "
                    f"dtype int8 or auto, not {dtype}, or load the float checkpoint it came from"
                )
            dtype = "int8"
        device = device or ("cpu" if dtype == "int8" else default_device())
        if dtype == "auto":
            dtype = "bfloat16" if device.startswith("cuda") else "float32"
        if dtype not in DTYPE_NAMES:
            raise ConfigError(f"dtype must be one of {', '.join(DTYPE_NAMES)}, got {dtype!r}")
        if dtype == "int8":
            check_int8(device)  # before the device's own check: its advice is the one that helps
        check_device(device)
        if threads is not None:
            torch.set_num_threads(threads)
        if int8_file:
            model, meta = load_int8_checkpoint(path)
        else:
            model, meta = load_checkpoint(path, device=device, dtype=DTYPES.get(dtype, torch.float32))
            if dtype == "int8":
                quantize_transformer(model)
            elif pack:
                model.pack_for_cpu(release=True)  # a no-op on CUDA and for other dtypes
        trim_heap()
        return cls(model, Tokenizer(path, meta.tokenizer), meta)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def decoding_config(self, config: DecodingConfig | None = None, **options: Any) -> DecodingConfig:
        """config (default: the checkpoint's own, CheckpointMeta.decoding) with fields overridden by keyword
        options, checked; unknown names are errors."""
        try:
            return dataclasses.replace(config or self.meta.decoding, **options)
        except TypeError as e:
            raise ConfigError(str(e)) from e

    def languages(self, source: str | None = None, target: str | None = None) -> Languages:
        """The language ids of a request (Tokenizer.languages), the checkpoint's own languages by default."""
        return self.tokenizer.languages(source or self.meta.source_lang, target or self.meta.target_lang)

    def encode(
        self, texts: Sequence[str], truncate: bool = False, languages: Languages | None = None
    ) -> list[list[int]]:
        """Source ids per text as the encoder takes them (ModelConfig.source_ids: within the model's length limit;
        of a summarizer that reads only a document's first tokens, those), after the languages' source ids."""
        check_texts(texts)
        prefix = (languages or self.languages()).source
        out = []
        for i, text in enumerate(texts):
            try:
                out.append(self.tokenizer.source_ids(text, self.model.cfg, truncate, prefix))
            except InputTooLongError as e:
                raise InputTooLongError(e.length, e.limit, index=i) from None
        return out

    def segment(self, texts: Sequence[str], source_lang: str | None = None) -> list[Segmented]:
        """Each text in the segments the model reads (model.segment): a translation model's in sentences, by the
        rules of source_lang (default: the checkpoint's source language), a summarizer's whole."""
        check_texts(texts)
        language = self.tokenizer.iso_code(source_lang or self.meta.source_lang)
        return [segment(t, language, self.meta.task) for t in texts]

    def encode_segments(
        self, texts: Sequence[Segmented], truncate: bool = False, languages: Languages | None = None
    ) -> list[Source]:
        """Every segment of every text, in order, as the model reads it (read_segments)."""
        return read_segments(texts, self.tokenizer, self.model.cfg, truncate, languages or self.languages())

    def translate(
        self,
        texts: Sequence[str],
        config: DecodingConfig | None = None,
        *,
        return_attention: bool = False,
        align: bool = False,
        truncate: bool = False,
        segment: bool = True,
        max_batch_size: int = 32,
        max_batch_tokens: int = 8192,
        source_lang: str | None = None,
        target_lang: str | None = None,
        **options: Any,
    ) -> list[Output]:
        """Translate texts with config (default: the checkpoint's own, else the paper's beam search), any of its fields
        overridden by keyword options (beam_size=5, early_stopping=False, ...). One Output per text, in order.
        A text is cut into sentences (segment), all of which go into one search, and their outputs are joined
        back into the text's shape (model.segment); segment=False reads each text whole. A multilingual model
        translates from source_lang to target_lang (its codes), by default the checkpoint's own."""
        languages = self.languages(source_lang, target_lang)
        cfg = dataclasses.replace(self.decoding_config(config, **options), target_prefix=languages.target)
        segmented = self.segment(texts, source_lang) if segment else [whole(t) for t in check_texts(texts)]
        sources = self.encode_segments(segmented, truncate, languages)
        outputs: list[Output | None] = [s.kept_whole() if not s.ids else None for s in sources]
        searched = [i for i, s in enumerate(sources) if s.ids]
        for k, nbest in self.search_refilled([sources[i].ids for i in searched], cfg, max_batch_size, max_batch_tokens):
            outputs[searched[k]] = Output([self.read(sources[searched[k]], h, return_attention, align) for h in nbest])
        done = iter(outputs)
        return [joined(t, [o for o in itertools.islice(done, len(t.spans)) if o is not None]) for t in segmented]

    def search_refilled(
        self, ids: list[list[int]], cfg: DecodingConfig, max_size: int = 32, max_tokens: int = 8192
    ) -> Iterator[tuple[int, list[Hypothesis]]]:
        """(index, n-best) of every source, as each finishes: one continuous search, shortest sources first,
        holding at most max_size sentences and max_tokens source tokens (padding counted), refilled as
        sentences finish (once a quarter of the rows is free, so that joining costs little: Admission)."""
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))[::-1]  # popped from the end: shortest first
        loop = self.loop(cfg.beam_size, max_size)
        admission = Admission(max_size, max_tokens, together=max_size // 4, wait_steps=None)
        while order or loop:
            if admission.due(len(loop), len(order)):
                held = {"loop": (len(loop), loop.source_length)}
                take: list[int] = []
                while order and admission.fits(held, "loop", len(ids[order[-1]])):
                    take.append(order.pop())
                loop.admit([ids[i] for i in take], [cfg] * len(take), take)
            for sentence in loop.step():
                yield int(str(sentence.tag)), sentence.n_best()

    def loop(self, beam_size: int, max_sentences: int | None = None) -> BeamLoop:
        """An empty continuous beam search that texts (source ids) join and leave at every step, at most
        max_sentences at once if given."""
        return BeamLoop(self.model, self.tokenizer.special, beam_size, max_sentences)

    def search(
        self, batch: list[list[int]], cfg: DecodingConfig, stop: Callable[[], bool] | None = None
    ) -> list[list[Hypothesis]]:
        """Beam search over one batch of source ids; stop as beam_search takes it."""
        return search_all(self.model, batch, [cfg] * len(batch), self.tokenizer.special, stop)

    def read(self, source: Source, hyp: Hypothesis, return_attention: bool = False, align: bool = False) -> Hypothesis:
        """The hypothesis with its text (what was kept out of the source put back: model.protect) and tokens
        (pieces), its attention maps when asked for, and with align its word alignment (Hypothesis.alignment)."""
        kept = source.protected.kept
        attention = self.attention(source.ids, hyp.ids, source.languages) if return_attention or kept or align else None
        text, tokens = self.tokenizer.decode_target(hyp.ids), self.tokenizer.target_pieces(hyp.ids)
        read = text
        links = aligned(attention.cross)[len(source.languages.source) :] if attention is not None else []
        pieces = self.tokenizer.source.encode(source.protected.text) if kept or align else []  # EOS left out
        spans: list[tuple[int, int]] = []
        moved = list(range(len(text) + 1))  # where each character of the model's output is in text
        if kept:
            text, spans, moved = restore(source.protected, text, self.places(source, pieces, hyp.ids, read, links))
        alignment = []
        if align:
            alignment = self.word_alignment(source, pieces, hyp.ids, tokens, read, links, moved)
            alignment += [(k.start, k.start + len(k.text), a, b) for k, (a, b) in zip(kept, spans, strict=True)]
        return dataclasses.replace(
            hyp,
            text=text,
            tokens=tokens,
            attention=attention if return_attention else None,
            alignment=tuple(sorted(alignment)),
        )

    def word_alignment(
        self,
        source: Source,
        pieces: list[str],
        out_ids: list[int],
        tokens: list[str],
        output: str,
        links: list[int],
        moved: list[int],
    ) -> list[tuple[int, int, int, int]]:
        """(start, end) in the sentence of each word the model read, and of the output word its first piece is
        aligned with (links: source piece -> output token), in output as restore moved it; none where words
        and pieces do not pair up (a tokenizer that normalizes spaces away)."""
        words = source.protected.read_words(source.sentence)
        out_words = [m.span() for m in WORD.finditer(output)]
        mark = self.tokenizer.word_mark
        first_piece = word_starts(pieces, mark)
        out_word_of = word_index(tokens, mark)
        if words is None or len(first_piece) != len(words) or max(out_word_of, default=-1) + 1 != len(out_words):
            return []
        pairs = []
        for (a, b), piece in zip(words, first_piece, strict=True):
            if piece < len(links) and out_ids:
                c, d = out_words[out_word_of[min(links[piece], len(out_ids) - 1)]]
                pairs.append((a, b, moved[c], moved[d - 1] + 1))
        return pairs

    def places(
        self, source: Source, pieces: list[str], out_ids: list[int], text: str, alignment: list[int]
    ) -> list[int]:
        """Where each kept span goes in text (the model's output of out_ids): before the output word aligned with
        the next source word after it, else after (and before the punctuation of) the one aligned with the source
        word before it. pieces: the source pieces the model read, EOS left out."""
        mark = self.tokenizer.word_mark
        words = [i for i, p in enumerate(pieces) if p.strip(mark + EDGE_PUNCTUATION)]  # pieces that are not punctuation
        starts = [j for j, p in enumerate(self.tokenizer.target_pieces(out_ids)) if p.startswith(mark)]
        at = lambda j: len(self.tokenizer.decode_target(out_ids[:j]))  # noqa: E731 - output characters before token j
        last = len(out_ids) - 1
        places = []
        for k in source.protected.kept:
            read = source.protected.text[: k.at]
            before = len(self.tokenizer.source.encode(read)) if read.strip() else 0  # pieces before the span
            following = [i for i in words if i >= before and i < len(alignment)]
            preceding = [i for i in words if i < before and i < len(alignment)]
            if last < 0:
                places.append(0)
            elif following:
                t = min(alignment[following[0]], last)
                places.append(at(max((j for j in starts if j <= t), default=0)))
            elif preceding:
                t = min(alignment[preceding[-1]], last)
                place = at(min((j for j in starts if j > t), default=len(out_ids)))
                while place > 0 and text[place - 1] in EDGE_PUNCTUATION:
                    place -= 1
                places.append(place)
            else:
                places.append(len(text))
        return places

    @torch.inference_mode()
    def attention(self, src_ids: list[int], out_ids: list[int], languages: Languages = NO_LANGUAGES) -> AttentionMaps:
        """Attention maps of a given output, recomputed with teacher forcing (equal to those of search). The
        source's language ids stay in (the model reads them); the output's forced ones are left out: rows from
        the first searched token on, and the decoder's columns from the last forced one (its start) on."""
        special = self.tokenizer.special
        src = torch.tensor([src_ids], device=self.device)
        mask = torch.ones_like(src, dtype=torch.bool)
        tgt = torch.tensor([[special.decoder_start, *languages.target, *out_ids]], device=self.device)
        memory, enc = self.model.encode(src, mask, need_weights=True)
        _, dec = self.model.decode(tgt, memory, mask, need_weights=True)
        t = len(languages.target)  # rows (and decoder columns) of the forced ids
        stack = lambda maps: torch.cat(maps).float().cpu()  # noqa: E731 - N x (1, h, T, S) -> (N, h, T, S)
        return AttentionMaps(
            source_tokens=[self.tokenizer.source.piece(i) for i in src_ids],
            target_tokens=self.tokenizer.target_pieces([*out_ids, special.eos]),
            cross=stack(dec.cross)[..., t:, :],
            encoder=stack(enc),
            decoder=stack(dec.decoder)[..., t:, t:],
        )
