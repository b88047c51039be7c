"""Continuous batching: the texts of many tasks wait in a pool and take rows of a running beam search
(model.beam.BeamLoop) as rows free up, requests before job texts; each finished text becomes an Output."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor

from model.beam import Hypothesis
from model.translator import AttentionMaps, Result, Translator
from service.tasks import AttentionSelection, Hyp, Output, Task


@dataclass
class Item:
    """One text of a task, encoded."""

    task: Task
    index: int
    ids: list[int]
    seq: int  # arrival order

    @property
    def tag(self) -> tuple[str, int]:
        """Its name in a BeamLoop."""
        return (self.task.id, self.index)

    @property
    def loop_key(self) -> tuple[str, int]:
        """The running search it goes to: its model and beam size."""
        return (self.task.model, self.task.options.beam_size)

    @property
    def interactive(self) -> bool:
        return self.task.kind == "request"


@dataclass
class Pending:
    """A task being worked on: its outputs so far."""

    task: Task
    outputs: list[Output | None]
    reported: float = 0.0  # when its progress was last reported (jobs)

    @property
    def done(self) -> int:
        return sum(o is not None for o in self.outputs)


@dataclass
class Pool:
    """Tasks in flight on one worker, and their texts waiting for a row."""

    tasks: dict[str, Pending] = field(default_factory=dict)
    waiting: list[Item] = field(default_factory=list)
    counter: itertools.count[int] = field(default_factory=itertools.count)

    def add(self, task: Task, ids: list[list[int]]) -> None:
        self.tasks[task.id] = Pending(task, [None] * len(ids))
        self.waiting += [Item(task, i, x, next(self.counter)) for i, x in enumerate(ids)]

    def take(self, fits: Callable[[Item], bool]) -> list[Item]:
        """Waiting texts in admission order (requests first, then by arrival) for as long as each fits; the
        taken ones leave the waiting list. A text that does not fit stops the taking: nothing overtakes it."""
        self.waiting.sort(key=lambda i: (not i.interactive, i.seq))
        taken: list[Item] = []
        for item in self.waiting:
            if not fits(item):
                break
            taken.append(item)
        self.waiting = self.waiting[len(taken) :]
        return taken

    def deliver(self, item: Item, output: Output) -> None:
        self.tasks[item.task.id].outputs[item.index] = output

    def finished(self) -> list[Pending]:
        """Tasks whose every text is decoded; removed from the pool."""
        out = [p for p in self.tasks.values() if p.done == len(p.outputs)]
        for p in out:
            del self.tasks[p.task.id]
        return out

    def drop(self, task_id: str) -> None:
        self.tasks.pop(task_id, None)
        self.waiting = [i for i in self.waiting if i.task.id != task_id]


def weights_json(t: Tensor | None, selection: AttentionSelection, decimals: int = 3) -> str:
    """(layers, h, queries, keys) weights as JSON [layer][head][query][key], of the selected layers and heads,
    rounded: the rounding is done in float64, so that 0.158 prints as 0.158. One matrix is encoded at a
    time, so that a thread serving HTTP in the same process gets the interpreter in between."""
    if t is None:
        return "null"
    layers = range(t.size(0)) if selection.layers is None else selection.layers
    heads = range(t.size(1)) if selection.heads is None else selection.heads
    rounded = torch.round(t.double(), decimals=decimals)
    return (
        "["
        + ",".join(
            "[" + ",".join(json.dumps(rounded[layer, head].tolist(), separators=(",", ":")) for head in heads) + "]"
            for layer in layers
        )
        + "]"
    )


def attention_json(maps: AttentionMaps, selection: AttentionSelection, decimals: int = 3) -> str:
    """Compact JSON for a browser: tokens and the selected [layer][head][query][key] weights, rounded."""
    stacks = {"cross": maps.cross, "encoder": maps.encoder, "decoder": maps.decoder}
    tokens = json.dumps({"source_tokens": maps.source_tokens, "target_tokens": maps.target_tokens}, ensure_ascii=False)
    weights = ",".join(
        f'"{kind}":' + weights_json(stacks[kind] if kind in selection.kinds else None, selection, decimals)
        for kind in stacks
    )
    return tokens[:-1] + "," + weights + "}"


def with_fields(fields: dict[str, object], obj: str) -> str:
    """The JSON object text obj with fields added in front, without parsing obj."""
    head = json.dumps(fields, ensure_ascii=False)
    return head[:-1] + ("," + obj[1:] if obj != "{}" else "}")


def attention_body(model: str, index: int, hypotheses: Sequence[Hyp | Result], maps: str) -> str:
    """POST /attention's answer: the n-best list, the chosen hypothesis (index) and maps, its attention_json."""
    chosen = hypotheses[index]
    return with_fields(
        {
            "model": model,
            "hypothesis": index,
            "text": chosen.text,
            "score": chosen.score,
            "hypotheses": [{"text": h.text, "score": h.score, "tokens": h.tokens} for h in hypotheses],
        },
        maps,
    )


def output_of(translator: Translator, item: Item, nbest: list[Hypothesis]) -> Output:
    """A finished text's n-best list as an Output, with the attention of the hypothesis its task asks for (the
    last one when the search found fewer)."""
    selection = item.task.attention
    chosen = None if selection is None else min(selection.hypothesis, len(nbest) - 1)
    results = [translator.result(item.ids, h, return_attention=j == chosen) for j, h in enumerate(nbest)]
    maps = None if chosen is None else results[chosen].attention
    attention = attention_json(maps, selection) if maps is not None and selection is not None else None
    return Output([Hyp(r.text, r.score, r.tokens) for r in results], attention)
