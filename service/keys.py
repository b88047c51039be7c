"""Every Redis key name the service uses, in one place; all start with the configured prefix."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Keys:
    prefix: str = "transformer"

    @property
    def stream(self) -> str:
        """The task stream: one entry per request or job, field "task" holding its JSON."""
        return f"{self.prefix}:tasks"

    @property
    def group(self) -> str:
        """The workers' consumer group on the stream."""
        return f"{self.prefix}:workers"

    @property
    def dead(self) -> str:
        """Dead-letter stream: tasks delivered too many times."""
        return f"{self.prefix}:dead"

    @property
    def stats(self) -> str:
        """Hash of counters the workers add to (batches, sentences, tokens, seconds)."""
        return f"{self.prefix}:stats"

    def job(self, task_id: str) -> str:
        """Hash: kind, status, done, total, error, model, owner, worker, deliveries."""
        return f"{self.prefix}:job:{task_id}"

    def results(self, task_id: str) -> str:
        """List: one Output JSON per text, in order (pages of a job are LRANGEs of it)."""
        return f"{self.prefix}:results:{task_id}"

    @property
    def answered(self) -> str:
        """Channel (not a key): the id of every request that ends is published here; each API process listens
        once and wakes the requests it is waiting for."""
        return f"{self.prefix}:answered"

    def worker(self, name: str) -> str:
        """A worker's heartbeat, JSON {"tasks", "texts"} in flight (expires when the worker stops beating)."""
        return f"{self.prefix}:worker:{name}"

    def workers_pattern(self) -> str:
        return f"{self.prefix}:worker:*"

    def bucket(self, name: str) -> str:
        """Hash: a token bucket (tokens, ms), named key:OWNER (rate limit) or auth:ADDRESS (failed keys)."""
        return f"{self.prefix}:bucket:{name}"
