"""Language identification among the languages the service's models read and write: POST /detect, and source
"auto" on /translate, for each text on its own.

lingua (lingua-language-detector) does it: its n-gram models ship inside its package (nothing is downloaded),
and it is the most accurate of the detectors that do on short text. Restricted to the models' languages, as
LibreTranslate restricts its own, it only chooses between languages a model here takes. A text of fewer than
MIN_LETTERS letters is refused: no detector tells the language of a word or two.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from lingua import IsoCode639_1, LanguageDetector, LanguageDetectorBuilder

from service.errors import InvalidRequest
from service.registry import Registry

MIN_LETTERS = 10  # "hello handsome" has 13; "Save", "OK" or "Datei" cannot be told apart
LETTERS = re.compile(r"[^\W\d_]")  # the OpenAPI document's letter (service.api.schemas.LETTER)


@dataclass(frozen=True)
class Guess:
    """A language (ISO 639-1) and how sure the detector is of it, in percent."""

    language: str
    confidence: float


def lingua_code(code: str) -> IsoCode639_1 | None:
    try:
        return IsoCode639_1.from_str(code.split("-")[0].lower())
    except ValueError:
        return None


class Detector:
    """lingua over a set of languages, its models loaded when built (a thread's work: about a second for two)."""

    def __init__(self, languages: Iterable[str]) -> None:
        known = {code: iso for code in languages if (iso := lingua_code(code)) is not None}
        self.languages = sorted(known)
        self.lingua: LanguageDetector | None = None
        if known:
            builder = LanguageDetectorBuilder.from_iso_codes_639_1(*known.values())
            self.lingua = builder.with_preloaded_language_models().build()

    @classmethod
    def of(cls, registry: Registry) -> Detector:
        """A detector for the languages of a registry's models, source and target."""
        codes = {c for m in registry.models.values() for c in (m.meta.source_lang, m.meta.target_lang) if c}
        return cls(codes)

    def detect(self, text: str, field: str, among: Iterable[str] | None = None) -> list[Guess]:
        """The languages of text, most likely first, confidences summing to 100 (among: only these languages);
        InvalidRequest for a text too short to tell, or with no language the detector knows to choose from."""
        letters = len(LETTERS.findall(text))
        if letters < MIN_LETTERS:
            raise InvalidRequest(
                field, f"too short to tell its language ({letters} letters; at least {MIN_LETTERS}): name the source"
            )
        if self.lingua is None:
            raise InvalidRequest(field, "no language to detect among: no model here names a language lingua knows")
        values = [
            Guess(c.language.iso_code_639_1.name.lower(), c.value)
            for c in self.lingua.compute_language_confidence_values(text)
        ]
        return self.among(values, self.languages if among is None else among, field)

    def among(self, guesses: list[Guess], languages: Iterable[str], field: str) -> list[Guess]:
        """guesses restricted to these languages, most likely first, their confidences scaled to sum to 100."""
        allowed = set(languages) & set(self.languages)
        if not allowed:
            raise InvalidRequest(field, "no language to detect among: no model here names a language lingua knows")
        kept = [g for g in guesses if g.language in allowed]
        total = sum(g.confidence for g in kept)
        if total <= 0:
            raise InvalidRequest(field, f"not in a language of the models here ({', '.join(sorted(allowed))})")
        return [Guess(g.language, round(100 * g.confidence / total, 1)) for g in kept]
