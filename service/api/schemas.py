"""Request and response bodies of the HTTP API (they are the OpenAPI document). A model's outputs become these
bodies here (hypothesis_of, output_of), the one change of type on their way back."""

from __future__ import annotations

import dataclasses
import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Discriminator, Field, Tag
from pydantic_core import PydanticCustomError

from model import output
from model.checkpoint import Task
from model.config import DecodingConfig, LengthPenalty
from model.errors import ConfigError
from model.output import ATTENTION_KINDS, AttentionKind
from service.api import examples
from service.queue.contract import JobStatus

DEFAULT = DecodingConfig()

# The largest limits any deployment may set (the settings' max_texts, max_job_texts, max_chars are at most
# these): the schema stops reading a list or a string past them, however long it is.
MOST_TEXTS = 1000
MOST_JOB_TEXTS = 100_000
MOST_CHARS = 100_000
NAME_CHARS = 200  # model ids and language codes
MOST_ALTERNATIVES = 16


# A text holds a character that is not white space (str.isspace's, every one of them): the schema's pattern,
# checked by service.api.text.check_texts with its own message.
NOT_BLANK = "[^\t\n\v\f\r\x1c-\x20\x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]"
# Detection needs 10 letters (service.detect.MIN_LETTERS): a letter is what this regex's letter class matches.
LETTER = r"[^\W\d_]"
TEN_LETTERS = rf"(?:{LETTER}[\W\d_]*){{10}}"
# Strings are refused when they hold a lone surrogate ("\\ud800" in JSON): pydantic's own str check.
Text = Annotated[str, Field(max_length=MOST_CHARS, json_schema_extra={"pattern": NOT_BLANK})]
Name = Annotated[str, Field(max_length=NAME_CHARS)]
# q is one text or a list: a list is validated as a list, anything else as one text.
UNION_TAGS = frozenset({"one text", "list of texts"})  # labels, not fields: error messages leave them out
TextOrTexts = Annotated[
    Annotated[Text, Tag("one text")] | Annotated[list[Text], Field(max_length=MOST_TEXTS), Tag("list of texts")],
    Discriminator(lambda v: "list of texts" if isinstance(v, list) else "one text"),
]


def _not_bool(value: object) -> object:
    """true and false are not numbers, though pydantic reads them as 1 and 0 (a beam size of `true`)."""
    if isinstance(value, bool):
        raise PydanticCustomError("int_type", "Input should be a valid integer, not true or false")
    return value


# A request's whole number: an integer, a float with no fraction or a string of one (form bodies), not a bool.
Count = Annotated[int, BeforeValidator(_not_bool)]


class Strict(BaseModel):
    """A request's body: unknown fields refused, and numbers finite (Python's JSON reader takes NaN and Infinity,
    which would otherwise fail a bound with a message that misleads: NaN is not above 10)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class DecodeOptions(Strict):
    """Beam search options: model.config.DecodingConfig's. One a request does not give is the model's own
    (its recipe's, GET /models), else the paper's (§6.1), shown as each field's default."""

    beam_size: Count = Field(DEFAULT.beam_size, ge=1, description="beams per input; 1 is greedy decoding")
    n_best: Count = Field(DEFAULT.n_best, ge=1, description="hypotheses returned per input (at most beam_size)")
    length_penalty: float = Field(DEFAULT.length_penalty, ge=0.0, le=10.0, description="alpha of the length penalty")
    length_penalty_form: LengthPenalty = Field(
        DEFAULT.length_penalty_form,
        description="gnmt: ((5+|Y|)/6)^alpha as in the paper; average: |Y|^alpha as in fairseq",
    )
    max_length: Count | None = Field(
        None,
        ge=1,
        le=4096,
        description=(f"most output tokens; default: {DEFAULT.max_len_a:g} x input length + {DEFAULT.max_len_b}"),
    )
    min_length: Count = Field(
        DEFAULT.min_length, ge=0, le=4096, description="EOS is not allowed before this many tokens"
    )
    no_repeat_ngram_size: Count = Field(
        DEFAULT.no_repeat_ngram_size, ge=0, le=16, description="forbid repeating n-grams of this size"
    )
    early_stopping: bool = Field(
        DEFAULT.early_stopping,
        description=(
            "stop an input once beam_size hypotheses have ended (fairseq, CTranslate2); false: search until no live "
            "hypothesis can beat them (tensor2tensor's exact bound; slower, rarely better)"
        ),
    )
    truncate: bool = Field(False, description="cut inputs longer than the model's limit instead of a 422")

    def decoding(self, base: DecodingConfig = DEFAULT, **fixed: Any) -> DecodingConfig:
        """base (the model's own options, CheckpointMeta.decoding) with the options this request gives and then
        fixed's (ConfigError when they do not fit together); base itself when nothing changes."""
        given = {name: getattr(self, name) for name in DecodingConfig.OPTIONS if name in self.model_fields_set}
        changes = {name: value for name, value in (given | fixed).items() if getattr(base, name) != value}
        cfg = dataclasses.replace(base, **changes) if changes else base
        return cfg.with_max_length(self.max_length) if "max_length" in self.model_fields_set else cfg


class TextRequest(DecodeOptions):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [examples.TEXT_REQUEST]})

    q: TextOrTexts = Field(..., description="one text or a list of texts")
    model: Name | None = Field(None, description="model id (GET /models); else chosen by source and target")
    source: Name | None = Field(
        None,
        description="source language code, e.g. 'en'; 'auto' (LibreTranslate): the "
        "one model for the target, a 400 listing them when several fit",
    )
    target: Name | None = Field(None, description="target language code, e.g. 'de'")
    # LibreTranslate's fields (its clients send them), beside ours:
    format: Literal["text", "html"] = Field(
        "text", description="html: the text between tags is translated and the markup kept"
    )
    alternatives: Count = Field(
        0,
        ge=0,
        le=MOST_ALTERNATIVES,
        description=(
            "LibreTranslate's: this many more translations per text, answered as `alternatives` (n_best 1 + this)"
        ),
    )
    api_key: Annotated[str, Field(max_length=NAME_CHARS)] | None = Field(
        None, description=("LibreTranslate's place for the API key; `Authorization: Bearer KEY` is ours")
    )


# A summary's length hint (POST /summarize): (min_length, max_length) in output tokens.
SUMMARY_LENGTHS = {"short": (3, 16), "medium": (8, 32), "long": (16, 64)}


class SummarizeRequest(TextRequest):
    length: (
        Literal["short", "medium", "long"]
        | Annotated[list[Annotated[Count, Field(ge=0, le=4096)]], Field(min_length=2, max_length=2)]
        | None
    ) = Field(
        None,
        description=(
            "the summary's length: short (3-16 tokens), medium (8-32), long (16-64), or [min, max] tokens; it "
            "sets min_length and max_length, which are then not given"
        ),
    )

    def decoding(self, base: DecodingConfig = DEFAULT, **fixed: Any) -> DecodingConfig:
        if self.length is None:
            return super().decoding(base, **fixed)
        low, high = SUMMARY_LENGTHS[self.length] if isinstance(self.length, str) else self.length
        if "min_length" in self.model_fields_set or "max_length" in self.model_fields_set:
            raise ConfigError("give either length or min_length and max_length, not both")
        if not 0 <= low <= high or high < 1:
            raise ConfigError(f"length [{low}, {high}] must be a range of at least one token, min <= max")
        return self.model_copy(update={"min_length": low, "max_length": high, "length": None}).decoding(base, **fixed)


class SentenceSpan(BaseModel):
    """One sentence of a text: where it is in the text, and where its output is in the output ([start, end) in
    characters)."""

    source: tuple[int, int]
    output: tuple[int, int]


class Hypothesis(BaseModel):
    """One output of the search. A text of several sentences is translated sentence by sentence, the outputs
    joined with the text's own whitespace and line breaks: its score and tokens are the sum and concatenation
    of theirs."""

    text: str
    score: float = Field(description="log-probability divided by the length penalty")
    tokens: list[str] = Field(description="its tokens (SentencePiece pieces), EOS left out")
    sentences: list[SentenceSpan] = Field(
        default_factory=list,
        description="how the text was cut into sentences, and where each one's output is (format text only)",
    )


class Output(Hypothesis):
    """The n-best list of one text: its best hypothesis, and the others as alternatives."""

    alternatives: list[Hypothesis] = Field(description="the rest of the n-best list, best first")


def spans_of(h: output.Hypothesis) -> list[SentenceSpan]:
    return [SentenceSpan(source=s.source, output=s.output) for s in h.sentences]


def hypothesis_of(h: output.Hypothesis) -> Hypothesis:
    return Hypothesis(text=h.text, score=h.score, tokens=h.tokens, sentences=spans_of(h))


def output_of(o: output.Output) -> Output:
    best, *rest = o.hypotheses
    return Output(
        text=best.text,
        score=best.score,
        tokens=best.tokens,
        sentences=spans_of(best),
        alternatives=[hypothesis_of(h) for h in rest],
    )


class TranslateResponse(BaseModel):
    model_config = ConfigDict(json_schema_extra={"examples": [examples.TRANSLATE_RESPONSE]})

    model: str | None = Field(
        None,
        description="the model that translated the texts (the first's, when `models` lists several); absent when "
        "every text was in the target language already (source 'auto')",
    )
    translatedText: str | list[str] = Field(description="the best translation(s), shaped like q (LibreTranslate)")
    alternatives: list[str] | list[list[str]] | None = Field(
        None,
        description=(
            "only when `alternatives` was asked for: the next translations of each text, shaped like q (LibreTranslate)"
        ),
    )
    translations: list[Output]
    detectedLanguage: DetectedLanguage | list[DetectedLanguage] | None = Field(
        None, description="with source 'auto': each text's language as detected, shaped like q (LibreTranslate)"
    )
    models: list[str | None] | None = Field(
        None,
        description="with source 'auto' and texts in several languages: each text's model, in q's order (null for "
        "a text in the target language already, answered as it is); when pivoting, the two models, in the order "
        "they translated",
    )
    pivot: str | None = Field(
        None,
        description="the language translated through, when no model translates source to target directly but "
        "one translates source to it and another it to target (LibreTranslate's and Argos's pivoting)",
    )


class DetectRequest(Strict):
    """LibreTranslate's POST /detect body."""

    model_config = ConfigDict(
        extra="forbid", json_schema_extra={"examples": [{"q": "Die Datei wurde nicht gefunden."}]}
    )

    q: Annotated[str, Field(max_length=MOST_CHARS, json_schema_extra={"pattern": TEN_LETTERS})] = Field(
        ..., description="the text whose language to tell (at least 10 letters)"
    )
    api_key: Annotated[str, Field(max_length=NAME_CHARS)] | None = Field(
        None, description="LibreTranslate's place for the API key; `Authorization: Bearer KEY` is ours"
    )


class DetectedLanguage(BaseModel):
    """A language the text may be in (ISO 639-1), among those of the service's models, with the detector's
    confidence in percent."""

    model_config = ConfigDict(json_schema_extra={"examples": [{"language": "de", "confidence": 99.4}]})

    language: str
    confidence: float


class Language(BaseModel):
    """A source language, as LibreTranslate's GET /languages gives it."""

    model_config = ConfigDict(json_schema_extra={"examples": [examples.LANGUAGE]})

    code: str
    name: str
    targets: list[str]


class NamedLanguage(BaseModel):
    code: str
    name: str


class StartLanguages(BaseModel):
    """The languages a client's page starts with."""

    source: NamedLanguage
    target: NamedLanguage


class FrontendSettings(BaseModel):
    """LibreTranslate's GET /frontend/settings, which its clients read before they translate (its field names)."""

    model_config = ConfigDict(json_schema_extra={"examples": [examples.FRONTEND_SETTINGS]})

    charLimit: int = Field(description="the most characters of one text (TRANSFORMER_MAX_CHARS)")  # noqa: N815
    frontendTimeout: int = Field(  # noqa: N815
        description="milliseconds a page that translates as one types waits after the last key (LibreTranslate's)"
    )
    apiKeys: bool = Field(description="whether the service has API keys (TRANSFORMER_API_KEYS)")  # noqa: N815
    keyRequired: bool = Field(description="whether translating needs a key")  # noqa: N815
    suggestions: bool = Field(description="whether POST /suggest takes better translations: never here")
    filesTranslation: bool = Field(description="whether POST /translate_file translates files")  # noqa: N815
    supportedFilesFormat: list[str] = Field(description="the file extensions it reads")  # noqa: N815
    language: StartLanguages | None = Field(None, description="absent when no model translates")


class SummarizeResponse(BaseModel):
    model_config = ConfigDict(json_schema_extra={"examples": [examples.SUMMARIZE_RESPONSE]})

    model: str
    summaries: list[Output]


class JobRequest(DecodeOptions):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [examples.JOB_REQUEST]})

    texts: list[Text] = Field(..., min_length=1, max_length=MOST_JOB_TEXTS)
    model: Name | None = None
    source: Name | None = None
    target: Name | None = None
    task: Task = "translation"


class JobProgress(BaseModel):
    done: int
    total: int


class JobResponse(BaseModel):
    model_config = ConfigDict(json_schema_extra={"examples": [examples.JOB_RESPONSE]})

    id: str
    status: JobStatus
    model: str | None = Field(
        None,
        description="null (absent from a new job's answer) for a file already in the target language, handed back "
        "as it is",
    )
    progress: JobProgress
    error: str | None = None
    results: list[Output] | None = Field(None, description="once done: results[offset : offset + limit]")
    offset: int = Field(0, description="index of the first of these results among the job's texts")
    next_offset: int | None = Field(None, description="offset of the next page of results; null after the last")
    file: str | None = Field(None, description="a file's job (POST /translate_file): the file's name")
    translatedFileUrl: str | None = Field(  # noqa: N815 (LibreTranslate's name)
        None, description="a file's job: where its translated file is downloaded, once, when done"
    )


class AttentionRequest(DecodeOptions):
    """One text, decoded with any options; the attention maps are those of one hypothesis of its n-best list."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [examples.ATTENTION_REQUEST]})

    q: Text = Field(..., description="one text")
    model: Name | None = None
    source: Name | None = None
    target: Name | None = None
    hypothesis: Count = Field(
        0,
        ge=0,
        description="whose attention: the n-best list's hypothesis of this index (0, the best; less than n_best)",
    )
    sentence: Count = Field(
        0,
        ge=0,
        le=MOST_CHARS,
        description="of a text of several sentences, the one (from 0) whose maps to return: each is translated alone",
    )
    kinds: list[AttentionKind] = Field(
        list(ATTENTION_KINDS),
        min_length=1,
        max_length=len(ATTENTION_KINDS),
        description="which attention maps to return",
    )
    layers: list[Annotated[Count, Field(ge=0, le=1000)]] | None = Field(
        None, min_length=1, max_length=1000, description="layer indices (from 0) to return; default: all"
    )
    heads: list[Annotated[Count, Field(ge=0, le=1000)]] | None = Field(
        None, min_length=1, max_length=1000, description="head indices (from 0) to return; default: all"
    )


class Axes(BaseModel):
    """What one kind of attention shows (service.attention.VIEWS): its title, what its rows (queries) and
    columns (keys) are, and their tokens."""

    title: str
    rows: str
    cols: str
    row_tokens: list[str]
    col_tokens: list[str]


class AttentionResponse(BaseModel):
    """Weights are [layer][head][query][key] of the layers and heads asked for, rounded to 3 decimals; cross
    has target queries over source keys. A kind not asked for is null, and absent from axes. text, score and
    target_tokens are the hypothesis'; hypotheses is the whole n-best list, best first, as /translate gives it."""

    model_config = ConfigDict(json_schema_extra={"examples": [examples.ATTENTION_RESPONSE]})

    model: str
    hypothesis: int = Field(description="the index in hypotheses of the one these maps belong to")
    sentence: int = Field(0, description="the sentence of the text these maps belong to (see hypotheses' sentences)")
    text: str
    score: float
    hypotheses: list[Hypothesis]
    source_tokens: list[str]
    target_tokens: list[str]
    axes: dict[AttentionKind, Axes] = Field(description="for each kind answered, what its rows and columns are")
    cross: list[Any] | None
    encoder: list[Any] | None
    decoder: list[Any] | None


class ModelEntry(BaseModel):
    id: str
    task: str
    source: str | None
    target: str | None
    languages: list[str] | None = Field(
        None,
        description="a multilingual model's languages (ISO 639-1 codes where one exists, else the model's own): "
        "it translates between any two; source and target are then its defaults, if any",
    )
    max_length: int = Field(description="longest input in tokens")
    reads_first: int | None = Field(
        None,
        description=(
            "a summarizer that reads only a document's first this many tokens (the rest is not summarized); "
            "absent when the whole input is read"
        ),
    )
    parameters: dict[str, Any] = Field(description="N, d_model, d_ff, h of the checkpoint")
    dtype: str = Field(
        "auto",
        description="the weights' type in the workers as configured (TRANSFORMER_DTYPE): "
        "auto (float32 on the CPU, bfloat16 on CUDA), float32, bfloat16, "
        "float16 or int8; int8 for an int8 checkpoint "
        "(`transformer quantize`) whatever is configured",
    )
    decoding: dict[str, Any] = Field(
        default_factory=dict,
        description=(
            "the model's own decoding options (its recipe's `decoding`, else the paper's): what a request does not "
            "set; max_len_a and max_len_b give the output limit a x input tokens + b when max_length is not set"
        ),
    )


class ModelsResponse(BaseModel):
    model_config = ConfigDict(json_schema_extra={"examples": [examples.MODELS_RESPONSE]})

    models: list[ModelEntry]
    errors: dict[str, str] = Field(default_factory=dict, description="checkpoints that could not be read")


class ErrorDetail(BaseModel):
    code: str
    message: str
    details: Any = None


class ErrorResponse(BaseModel):
    error: ErrorDetail


def attention_json(model: str, index: int, sentence: int, hypotheses: list[output.Hypothesis], maps: str) -> str:
    """An AttentionResponse as JSON text: the n-best list, the chosen hypothesis (index), and its maps as the
    worker wrote them (service.attention.maps_json), which are not parsed again."""
    chosen = hypotheses[index]
    fields = {
        "model": model,
        "hypothesis": index,
        "sentence": sentence,
        "text": chosen.text,
        "score": chosen.score,
        "hypotheses": [hypothesis_of(h).model_dump() for h in hypotheses],
    }
    head = json.dumps(fields, ensure_ascii=False)
    return head[:-1] + ("," + maps[1:] if maps != "{}" else "}")
