"""The model registry: every checkpoint in the models directory, by id (its directory name): what the API needs
to check a request without the weights, and the weights for a worker."""

from __future__ import annotations

import functools
import gc
import logging
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from model.checkpoint import CONFIG_FILE, CheckpointMeta, read_meta
from model.errors import CheckpointError, InputError, InputTooLongError, ModelError, UnknownLanguageError
from model.language_codes import matching
from model.segment import Segmented, segment
from model.tokenizer import NO_LANGUAGES, Languages, Tokenizer
from model.translator import Translator, read_segments
from service.errors import InvalidRequest, ModelNotFound
from service.settings import ServiceSettings

log = logging.getLogger("service")
MODELS_POLL_S = 5.0  # how often an empty models directory is looked at again
# An ASCII segment's tokens beyond one per character, at most: a word-start piece and EOS, and one spare.
ASCII_EXTRA = 3


@dataclass(frozen=True)
class ModelInfo:
    """A checkpoint's description and tokenizer: enough to validate requests without loading weights."""

    id: str
    path: Path
    meta: CheckpointMeta
    tokenizer: Tokenizer

    @property
    def task(self) -> str:
        return self.meta.task

    @property
    def max_len(self) -> int:
        return self.meta.model.max_len

    @property
    def multilingual(self) -> bool:
        return self.tokenizer.multilingual

    def languages(self) -> list[str]:
        """A multilingual model's languages, by the codes users name them by (ISO 639-1 where one exists)."""
        return sorted(self.tokenizer.public.values())

    def languages_of(self, pair: tuple[str | None, str | None]) -> Languages:
        """The language ids a request's segments start with and its outputs are forced to: a multilingual
        model's for pair (its own codes, ModelInfo.pair), none for a model of one pair."""
        return self.tokenizer.languages(*pair) if self.multilingual else self.tokenizer.languages(None, None)

    def knows(self, code: str) -> bool:
        return self.tokenizer.own_code(code) is not None

    def pair(self, source: str | None, target: str | None) -> tuple[str | None, str | None]:
        """A multilingual model's own codes for a request's source and target (its defaults where not given),
        checked: InvalidRequest names an unknown or missing one. (None, None) for a model of one pair."""
        if not self.multilingual:
            return None, None
        own = []
        for side, code, default in (
            ("source", source, self.meta.source_lang),
            ("target", target, self.meta.target_lang),
        ):
            found = self.tokenizer.own_code(code) if code else default
            if found is None:
                raise InvalidRequest(side, str(UnknownLanguageError(side, code, self.languages())))
            own.append(found)
        return own[0], own[1]

    def dtype(self, configured: str) -> str:
        """The dtype it is served in: int8 for an int8 checkpoint (`transformer quantize`), else configured."""
        return "int8" if self.meta.weights == "int8" else configured

    def segment(self, text: str, source_lang: str | None = None) -> Segmented:
        """The text in the segments the model reads (model.segment), as a worker's Translator cuts it."""
        return segment(text, self.tokenizer.iso_code(source_lang or self.meta.source_lang), self.meta.task)

    def counted(self, text: str, field: str, most_segments: int, source_lang: str | None) -> Segmented:
        """text in segments (segment); InvalidRequest when it has more than most_segments of them."""
        segmented = self.segment(text, source_lang)
        if len(segmented.spans) > most_segments:
            raise InvalidRequest(
                field,
                f"{len(segmented.spans):,} sentences, more than the limit of {most_segments:,} per text "
                "(TRANSFORMER_MAX_SENTENCES): send it in parts",
            )
        return segmented

    def source_lengths(
        self,
        text: str,
        field: str,
        truncate: bool,
        most_segments: int,
        languages: Languages = NO_LANGUAGES,
        source_lang: str | None = None,
    ) -> list[int]:
        """Source tokens of each of text's segments as the encoder takes them (EOS and the languages' source ids
        included); InvalidRequest when it has more than most_segments of them, or when the model cannot take one
        (too long without truncate, invalid Unicode)."""
        segmented = self.counted(text, field, most_segments, source_lang)
        try:  # as the worker's Translator reads it
            sources = read_segments([segmented], self.tokenizer, self.meta.model, truncate, languages)
            return [len(s.ids) for s in sources]
        except InputTooLongError as e:  # the field names the text: the error names only the sentence
            raise InvalidRequest(field, str(InputTooLongError(e.length, e.limit, sentence=e.sentence))) from None
        except InputError as e:
            raise InvalidRequest(field, str(e)) from None


class Registry:
    """Models found in a directory. Broken checkpoints are skipped and reported, never fatal."""

    def __init__(self, models: dict[str, ModelInfo], errors: dict[str, str]) -> None:
        self.models = models
        self.errors = errors

    @classmethod
    def scan(cls, directory: Path) -> Registry:
        models: dict[str, ModelInfo] = {}
        errors: dict[str, str] = {}
        paths = sorted(p for p in directory.iterdir() if (p / CONFIG_FILE).is_file()) if directory.is_dir() else []
        for path in paths:
            try:
                meta = read_meta(path)
                models[path.name] = ModelInfo(path.name, path, meta, Tokenizer(path, meta.tokenizer))
            except (ModelError, OSError, RuntimeError) as e:
                errors[path.name] = (
                    f"{Path(e.path).name}: {e.reason}" if isinstance(e, CheckpointError) else type(e).__name__
                )  # a file's name, never the server's paths
                log.error("skipping model %s: %s", path.name, e)
        return cls(models, errors)

    @property
    def ids(self) -> list[str]:
        return sorted(self.models)

    def get(self, model_id: str) -> ModelInfo:
        if model_id not in self.models:
            raise ModelNotFound(f"unknown model {model_id!r}", self.ids)
        return self.models[model_id]

    @functools.cached_property
    def codes(self) -> dict[str, None]:
        """Every language code the models take, as an ordered set: the bilingual models' and the multilingual ones'
        ISO 639-1 codes first, then the multilingual models' own codes (so that "en-US" names "en", not
        "eng_Latn")."""
        infos = self.models.values()
        public = {c for m in infos for c in (m.meta.source_lang, m.meta.target_lang) if c and not m.multilingual}
        public |= {c for m in infos if m.multilingual for c in m.languages()}
        own = {c for m in infos if m.multilingual for c in m.tokenizer.public} - public
        return dict.fromkeys([*sorted(public), *sorted(own)])

    def code(self, code: str) -> str:
        """The code the models know a user's language code by (language_codes.matching: "EN", "en-US" and
        "en_GB" are "en"); the code itself where none matches, so that errors name it as it was given."""
        return matching(code, self.codes) or code

    def resolve(self, task: str, model: str | None, source: str | None, target: str | None) -> ModelInfo:
        """The model named, else the one of this task for the languages given (in any case, or as BCP 47 tags:
        code), else the only one of this task."""
        if model is not None:
            info = self.get(model)
            if info.task != task:
                raise InvalidRequest("model", f"{model!r} is a {info.task} model, not a {task} one")
            return info
        source, target = source and self.code(source), target and self.code(target)
        found = [
            m
            for m in self.models.values()
            if m.task == task
            and (source is None or m.meta.source_lang == source)
            and (target is None or m.meta.target_lang == target)
        ]
        if not found:  # no model of that one pair: a multilingual one that knows both languages
            found = [
                m
                for m in self.models.values()
                if m.task == task
                and m.multilingual
                and (source is None or m.knows(source))
                and (target is None or m.knows(target))
            ]
        if len(found) == 1:
            return found[0]
        of_task = sorted(m.id for m in self.models.values() if m.task == task)
        if not found and task == "translation" and source is not None and source == target:  # a request to fix
            same = f"the same language as source ({source}): no {task} model here takes {source} to {source}"
            raise InvalidRequest("target", same)
        if not found:
            langs = f" from {source or 'any'} to {target or 'any'}" if source or target else ""
            raise ModelNotFound(f"no {task} model{langs}", of_task, f"{task} models")  # not "models: none"
        raise InvalidRequest(
            "model",
            f"several {task} models match ({', '.join(sorted(m.id for m in found))}); "
            "name one with 'model' or narrow 'source' and 'target'",
        )

    def pivot(self, task: str, source: str, target: str) -> tuple[ModelInfo, str, ModelInfo] | None:
        """Where no model translates source to target: a model from source to some x and one from x to target
        (x = English first, as LibreTranslate and Argos pivot), or None. Models that match ambiguously are passed
        over, as are pairs that only a multilingual model's defaults would make. A language is never pivoted into
        itself (there and back would answer a paraphrase, not the text)."""
        source, target = self.code(source), self.code(target)
        if source == target:
            return None
        for x in sorted(self._between() - {source, target}, key=lambda code: (code != "en", code)):
            try:
                return self.resolve(task, None, source, x), x, self.resolve(task, None, x, target)
            except (ModelNotFound, InvalidRequest):
                continue
        return None

    @functools.cached_property
    def targets(self) -> dict[str, list[str]]:
        """Each source language of the translation models and the targets it reaches: directly (a bilingual
        model's pair, every pair of a multilingual model's languages) or through a pivot (Registry.pivot), as
        LibreTranslate lists Argos's pivoted pairs. Worked out once, from the pairs that resolve answers with one
        model, without trying pivot on every pair."""
        models = [m for m in self.models.values() if m.task == "translation"]
        direct: dict[str, set[str]] = {}
        for m in models:
            if m.multilingual:
                codes = m.languages()
                for code in codes:
                    direct.setdefault(code, set()).update(c for c in codes if c != code)
            elif m.meta.source_lang and m.meta.target_lang:
                direct.setdefault(m.meta.source_lang, set()).add(m.meta.target_lang)
        one, between = self._resolved_pairs(models), self._between()
        reached: dict[str, list[str]] = {}
        for source, targets in direct.items():
            through = set(targets)
            for x in one.get(source, set()) & between:  # source -> x -> t, as pivot takes it
                through |= one.get(x, set())
            through.discard(source)
            reached[source] = sorted(through)
        return reached

    def _resolved_pairs(self, models: list[ModelInfo]) -> dict[str, set[str]]:
        """source -> every x for which resolve(translation, None, source, x) finds one model: one whose pair is
        (source, x), else one multilingual model that knows both."""
        named: Counter[tuple[str, str]] = Counter(
            (m.meta.source_lang, m.meta.target_lang) for m in models if m.meta.source_lang and m.meta.target_lang
        )
        codes = self._between() | {s for s, _ in named}
        known: Counter[tuple[str, str]] = Counter(
            (s, x)
            for m in models
            if m.multilingual
            for knows in [[c for c in codes if m.knows(c)]]
            for s in knows
            for x in knows
        )
        one: dict[str, set[str]] = {}
        for s, x in named.keys() | known.keys():
            if s != x and (named[s, x] == 1 or (named[s, x] == 0 and known[s, x] == 1)):
                one.setdefault(s, set()).add(x)
        return one

    def _between(self) -> set[str]:
        """The languages pivot may go through: the models' targets and the multilingual models' languages."""
        between = {m.meta.target_lang for m in self.models.values() if m.meta.target_lang}
        return between | {code for m in self.models.values() if m.multilingual for code in m.languages()}

    def lengths(
        self,
        model: str,
        texts: list[str],
        truncate: bool,
        field: str = "q",
        most_segments: int = 1_000_000,
        pair: tuple[str | None, str | None] = (None, None),
    ) -> list[int]:
        """Check texts against a model (a multilingual one's pair: its own codes); returns the source tokens of
        each of their segments, in order. CPU work: callers on the event loop run it in a thread for all but
        short texts."""
        info = self.get(model)
        languages = info.languages_of(pair)
        return [
            n
            for i, t in enumerate(texts)
            for n in info.source_lengths(t, f"{field}[{i}]", truncate, most_segments, languages, pair[0])
        ]

    def length_bounds(
        self,
        model: str,
        texts: list[str],
        field: str = "q",
        most_segments: int = 1_000_000,
        pair: tuple[str | None, str | None] = (None, None),
    ) -> list[int] | None:
        """At least the source tokens of each segment of texts (lengths'), without tokenizing them: for ASCII text,
        whose every SentencePiece or byte-level BPE piece covers at least one character, a segment's characters
        plus the word-start piece, EOS and the languages' source ids. None where a text is not ASCII or a bound
        reaches the model's length limit: only lengths can tell then. Checks the segments' number as lengths does."""
        info = self.get(model)
        if not all(t.isascii() for t in texts):
            return None
        languages = info.languages_of(pair)
        extra = ASCII_EXTRA + len(languages.source)
        bounds = [
            len(sentence) + extra
            for i, t in enumerate(texts)
            for sentence in info.counted(t, f"{field}[{i}]", most_segments, pair[0]).sentences
        ]
        return bounds if all(n <= info.max_len for n in bounds) else None

    def load_translators(self, device: str | None, dtype: str, threads: int | None) -> dict[str, Translator]:
        """Load every model's weights and warm it up with one short decode. An int8 checkpoint (`transformer
        quantize`) loads as int8 whatever dtype is configured."""
        out = {}
        for info in self.models.values():
            translator = Translator.load(info.path, device=device, dtype=info.dtype(dtype), threads=threads)
            codes: list[str | None] = [*sorted(translator.tokenizer.language_ids)[:2], None, None]  # multilingual
            source, target = info.meta.source_lang or codes[0], info.meta.target_lang or codes[1]
            translator.translate(["Hello."], beam_size=2, max_len_b=4, source_lang=source, target_lang=target)
            out[info.id] = translator
            log.info("loaded %s (%s) on %s", info.id, info.task, translator.device)
        return out


def no_models_reason(settings: ServiceSettings, registry: Registry) -> str:
    where = settings.models_dir
    if not where.is_dir():
        return f"the models directory {where} does not exist (TRANSFORMER_MODELS_DIR, --models-dir)"
    broken = f"; {len(registry.errors)} could not be read (GET /models says why)" if registry.errors else ""
    return f"no models in {where}: put a checkpoint directory there (see the README's Models){broken}"


def wait_for_models(
    settings: ServiceSettings, stop: threading.Event, waiting: Callable[[Registry, str], None] | None = None
) -> Registry | None:
    """The registry once the models directory holds a model, looking again every MODELS_POLL_S, with a warning
    (and the empty registry with the reason to `waiting`, for /readyz) while it holds none; None when stop is set
    first."""
    warned = False
    while True:
        registry = Registry.scan(settings.models_dir)
        if registry.models:
            if warned:
                log.info("models found in %s: %s", settings.models_dir, ", ".join(registry.ids))
            return registry
        reason = no_models_reason(settings, registry)
        if waiting is not None:
            waiting(registry, reason)
        if not warned:
            log.warning("%s; waiting for one (looking every %.0f s)", reason, MODELS_POLL_S)
            warned = True
        if stop.wait(MODELS_POLL_S):
            return None


def freeze_loaded() -> None:
    """Put everything loaded so far (torch, the models, the app: some 300,000 objects) beyond the garbage
    collector's reach: each of its full collections would walk them all again while requests wait."""
    gc.collect()
    gc.freeze()
