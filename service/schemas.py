"""Request and response bodies of the HTTP API (they are the OpenAPI document)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from service.tasks import TaskStatus


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class DecodeOptions(Strict):
    """Beam search options; the defaults are the paper's (§6.1)."""

    beam_size: int = Field(4, ge=1, description="beams per input; 1 is greedy decoding")
    n_best: int = Field(1, ge=1, description="hypotheses returned per input (at most beam_size)")
    length_penalty: float = Field(0.6, ge=0.0, le=10.0, description="alpha of the length penalty")
    length_penalty_form: Literal["gnmt", "average"] = Field(
        "gnmt", description="gnmt: ((5+|Y|)/6)^alpha as in the paper; average: |Y|^alpha as in fairseq")
    max_length: int | None = Field(None, ge=1, le=4096,
                                   description="most output tokens; default: input length + 50")
    min_length: int = Field(0, ge=0, le=4096, description="EOS is not allowed before this many tokens")
    no_repeat_ngram_size: int = Field(0, ge=0, le=16, description="forbid repeating n-grams of this size")
    truncate: bool = Field(False, description="cut inputs longer than the model's limit instead of a 422")


class TextRequest(DecodeOptions):
    q: str | list[str] = Field(..., description="one text or a list of texts")
    model: str | None = Field(None, description="model id (GET /models); else chosen by source and target")
    source: str | None = Field(None, description="source language code, e.g. 'en'")
    target: str | None = Field(None, description="target language code, e.g. 'de'")


class Hypothesis(BaseModel):
    text: str
    score: float = Field(description="log-probability divided by the length penalty")


class OutputText(Hypothesis):
    tokens: list[str]
    alternatives: list[Hypothesis] = Field(description="the rest of the n-best list, best first")


class TranslateResponse(BaseModel):
    model: str
    translatedText: str | list[str] = Field(description="the best translation(s), shaped like q (LibreTranslate)")
    translations: list[OutputText]


class SummarizeResponse(BaseModel):
    model: str
    summaries: list[OutputText]


class JobRequest(DecodeOptions):
    texts: list[str] = Field(..., min_length=1)
    model: str | None = None
    source: str | None = None
    target: str | None = None
    task: Literal["translation", "summarization"] = "translation"


class JobProgress(BaseModel):
    done: int
    total: int


class JobResponse(BaseModel):
    id: str
    status: TaskStatus
    model: str
    progress: JobProgress
    error: str | None = None
    results: list[OutputText] | None = None


class AttentionRequest(Strict):
    q: str = Field(..., description="one text")
    model: str | None = None
    source: str | None = None
    target: str | None = None
    beam_size: int = Field(4, ge=1)
    max_length: int | None = Field(None, ge=1, le=1024)
    truncate: bool = False


class AttentionResponse(BaseModel):
    """Weights are [layer][head][query][key]: cross has target queries over source keys."""

    model: str
    text: str
    score: float
    source_tokens: list[str]
    target_tokens: list[str]
    cross: list[Any]
    encoder: list[Any] | None
    decoder: list[Any] | None


class ModelEntry(BaseModel):
    id: str
    task: str
    source: str | None
    target: str | None
    max_length: int = Field(description="longest input in tokens")
    parameters: dict[str, Any] = Field(description="N, d_model, d_ff, h of the checkpoint")


class ModelsResponse(BaseModel):
    models: list[ModelEntry]
    errors: dict[str, str] = Field(default_factory=dict, description="checkpoints that could not be read")


class ErrorDetail(BaseModel):
    code: str
    message: str
    details: Any = None


class ErrorResponse(BaseModel):
    error: ErrorDetail
