"""What travels through the queue: a task (one request or batch job) and its outputs, all plain JSON."""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any, Literal

from model.config import DecodingConfig

Kind = Literal["request", "job"]
AttentionKind = Literal["cross", "encoder", "decoder"]


class TaskStatus(StrEnum):
    queued = "queued"
    running = "running"
    done = "done"
    failed = "failed"
    cancelled = "cancelled"  # a job cancelled by its owner, or a request that timed out; workers drop it


@dataclass(frozen=True)
class AttentionSelection:
    """Which attention maps a /attention request returns: of which hypothesis of the n-best list (from 0), and
    which kinds, layers and heads (None: every one)."""

    kinds: tuple[AttentionKind, ...] = ("cross", "encoder", "decoder")
    layers: tuple[int, ...] | None = None
    heads: tuple[int, ...] | None = None
    hypothesis: int = 0

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AttentionSelection:
        layers, heads = data.get("layers"), data.get("heads")
        return cls(
            tuple(data["kinds"]),
            None if layers is None else tuple(layers),
            None if heads is None else tuple(heads),
            int(data.get("hypothesis", 0)),
        )


@dataclass(frozen=True)
class Task:
    """One request or job: texts for one model, with one set of options."""

    model: str
    texts: list[str]
    options: DecodingConfig = field(default_factory=DecodingConfig)
    kind: Kind = "request"
    attention: AttentionSelection | None = None  # return these attention maps of one hypothesis
    truncate: bool = False
    owner: str | None = None  # owner_of(API key) that created it; only that key may read or cancel a job
    deadline: float | None = None  # time.time() after which nobody waits for the answer (requests)
    id: str = field(default_factory=lambda: uuid.uuid4().hex)
    created: float = field(default_factory=time.time)

    def expired(self, now: float) -> bool:
        return self.deadline is not None and now > self.deadline

    def to_json(self) -> str:
        return json.dumps({**asdict(self), "options": self.options.to_dict()}, ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str | bytes) -> Task:
        data = json.loads(text)
        attention = data.get("attention")
        return cls(
            **{
                **data,
                "options": DecodingConfig.from_dict(data["options"]),
                "attention": None if attention is None else AttentionSelection.from_dict(attention),
            }
        )


@dataclass(frozen=True)
class Hyp:
    text: str
    score: float
    tokens: list[str]


@dataclass(frozen=True)
class Output:
    """The n-best list of one text, best first, and the best one's attention maps when asked for: a JSON
    object as text, made by the worker, which the API passes on without parsing it."""

    hypotheses: list[Hyp]
    attention: str | None = None

    def to_json(self) -> str:
        return json.dumps(asdict(self), ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str | bytes) -> Output:
        data = json.loads(text)
        return cls([Hyp(**h) for h in data["hypotheses"]], data.get("attention"))


ErrorKind = Literal["failed", "too_large"]


@dataclass(frozen=True)
class TaskResult:
    """What a worker answers: one Output per text, or an error for the whole task: "failed" (a bug, or a
    task that crashed workers) or "too_large" (its result is more than the queue takes)."""

    outputs: list[Output] = field(default_factory=list)
    error: str | None = None
    error_kind: ErrorKind = "failed"


@dataclass(frozen=True)
class JobState:
    """A task's status as GET /jobs/{id} shows it, with one page of its outputs once it is done."""

    id: str
    status: TaskStatus
    done: int
    total: int
    model: str
    error: str | None = None
    outputs: list[Output] | None = None  # outputs[offset : offset + limit], when done
    offset: int = 0
