"""What travels through the queue: a task (one request or batch job) and its result, both plain JSON."""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any, Literal

from model.config import DecodingConfig

Kind = Literal["request", "job"]


class TaskStatus(StrEnum):
    queued = "queued"
    running = "running"
    done = "done"
    failed = "failed"
    cancelled = "cancelled"  # a synchronous request that timed out; workers skip it


@dataclass(frozen=True)
class Options:
    """Per-request decoding options (a DecodingConfig without the model-specific banned ids)."""

    beam_size: int = 4
    n_best: int = 1
    length_penalty: float = 0.6
    length_penalty_form: Literal["gnmt", "average"] = "gnmt"
    max_len_a: float = 1.0
    max_len_b: int = 50
    min_length: int = 0
    no_repeat_ngram_size: int = 0

    def decoding(self) -> DecodingConfig:
        return DecodingConfig(**asdict(self))


@dataclass(frozen=True)
class Task:
    """One request or job: texts for one model, with one set of options."""

    model: str
    texts: list[str]
    options: Options = field(default_factory=Options)
    kind: Kind = "request"
    attention: bool = False  # return the best hypothesis' attention maps
    truncate: bool = False
    id: str = field(default_factory=lambda: uuid.uuid4().hex)
    created: float = field(default_factory=time.time)

    def to_json(self) -> str:
        return json.dumps(asdict(self), ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str | bytes) -> Task:
        data = json.loads(text)
        return cls(**{**data, "options": Options(**data["options"])})


@dataclass(frozen=True)
class Hyp:
    text: str
    score: float
    tokens: list[str]


@dataclass(frozen=True)
class Output:
    """The n-best list of one text, best first, and the best one's attention (compact JSON) when asked."""

    hypotheses: list[Hyp]
    attention: dict[str, Any] | None = None


@dataclass(frozen=True)
class TaskResult:
    """What a worker answers: one Output per text, or an error for the whole task."""

    outputs: list[Output] = field(default_factory=list)
    error: str | None = None

    def to_json(self) -> str:
        return json.dumps(asdict(self), ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str | bytes) -> TaskResult:
        data = json.loads(text)
        outputs = [Output([Hyp(**h) for h in o["hypotheses"]], o.get("attention")) for o in data["outputs"]]
        return cls(outputs, data.get("error"))


@dataclass(frozen=True)
class JobState:
    """A task's status as GET /jobs/{id} shows it."""

    id: str
    status: TaskStatus
    done: int
    total: int
    model: str
    error: str | None = None
    result: TaskResult | None = None
