"""Dynamic batching: texts of many tasks, grouped by model and options, cut into length-sorted batches
under a token budget (padding counted), each decoded by one call of the batched beam search."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

import torch

from model.translator import AttentionMaps, Translator
from service.tasks import Hyp, Options, Output, Task

GroupKey = tuple[str, Options, bool]  # model, options, attention


@dataclass
class Item:
    """One text of a task, encoded."""

    task: Task
    index: int
    ids: list[int]
    seq: int  # arrival order

    @property
    def key(self) -> GroupKey:
        return (self.task.model, self.task.options, self.task.attention)

    @property
    def interactive(self) -> bool:
        return self.task.kind == "request"


@dataclass
class Pending:
    """A task being worked on: its outputs so far."""

    task: Task
    outputs: list[Output | None]

    @property
    def done(self) -> int:
        return sum(o is not None for o in self.outputs)


@dataclass
class Pool:
    """Tasks in flight on one worker and their texts still to decode."""

    tasks: dict[str, Pending] = field(default_factory=dict)
    items: list[Item] = field(default_factory=list)
    counter: itertools.count[int] = field(default_factory=itertools.count)

    def add(self, task: Task, ids: list[list[int]]) -> None:
        self.tasks[task.id] = Pending(task, [None] * len(ids))
        self.items += [Item(task, i, x, next(self.counter)) for i, x in enumerate(ids)]

    @property
    def sentences(self) -> int:
        return len(self.items)

    def tokens(self) -> int:
        """Source tokens waiting, as one padded batch would count them."""
        return len(self.items) * max((len(i.ids) for i in self.items), default=0)

    def next_batch(self, max_tokens: int, max_size: int) -> list[Item]:
        """The batch holding the oldest waiting text (requests before jobs), filled with texts of the same
        model and options that are nearest to it in length, within the budgets. Removes it from the pool."""
        oldest = min(self.items, key=lambda i: (not i.interactive, i.seq))
        group = sorted((i for i in self.items if i.key == oldest.key), key=lambda i: (len(i.ids), i.seq))
        lo = hi = group.index(oldest)
        hi += 1
        while hi - lo < max_size:
            # grow towards the neighbour closer in length; a padded batch costs size x longest
            right = group[hi] if hi < len(group) else None
            left = group[lo - 1] if lo > 0 else None
            if right is not None and (left is None or len(right.ids) - len(group[hi - 1].ids)
                                      <= len(group[lo].ids) - len(left.ids)):
                if (hi - lo + 1) * len(right.ids) > max_tokens:
                    break
                hi += 1
            elif left is not None:
                if (hi - lo + 1) * len(group[hi - 1].ids) > max_tokens:
                    break
                lo -= 1
            else:
                break
        batch = group[lo:hi]
        chosen = {id(i) for i in batch}
        self.items = [i for i in self.items if id(i) not in chosen]
        return batch

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
        self.items = [i for i in self.items if i.task.id != task_id]


def attention_json(maps: AttentionMaps, decimals: int = 3) -> dict[str, Any]:
    """Compact JSON for a browser: tokens and [layer][head][query][key] weights, rounded."""
    def rows(t: torch.Tensor | None) -> list[Any] | None:
        return None if t is None else torch.round(t.float(), decimals=decimals).tolist()
    return {"source_tokens": maps.source_tokens, "target_tokens": maps.target_tokens,
            "cross": rows(maps.cross), "encoder": rows(maps.encoder), "decoder": rows(maps.decoder)}


def decode_batch(translator: Translator, batch: list[Item]) -> tuple[list[Output], int]:
    """One batched beam search over items that share model and options; returns outputs and target tokens."""
    task = batch[0].task
    cfg = task.options.decoding()
    nbests = translator.search([i.ids for i in batch], cfg)
    outputs, tokens = [], 0
    for item, nbest in zip(batch, nbests, strict=True):
        results = [translator.result(item.ids, h, return_attention=task.attention and j == 0)
                   for j, h in enumerate(nbest)]  # attention for the best hypothesis only
        best = results[0].attention
        outputs.append(Output([Hyp(r.text, r.score, r.tokens) for r in results],
                              attention_json(best) if best is not None else None))
        tokens += len(nbest[0].tokens) + 1  # the best hypothesis and its EOS
    return outputs, tokens
