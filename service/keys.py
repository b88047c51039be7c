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
        """Hash: status, done, total, error, model, worker."""
        return f"{self.prefix}:job:{task_id}"

    def result(self, task_id: str) -> str:
        """String: the result JSON."""
        return f"{self.prefix}:result:{task_id}"

    def done(self, task_id: str) -> str:
        """List a waiting API process BLPOPs; one element is pushed when the task ends."""
        return f"{self.prefix}:done:{task_id}"

    def worker(self, name: str) -> str:
        """A worker's heartbeat (expires when the worker stops beating)."""
        return f"{self.prefix}:worker:{name}"

    def workers_pattern(self) -> str:
        return f"{self.prefix}:worker:*"

    def rate(self, api_key: str, window: int) -> str:
        """Request counter of one API key in one minute window."""
        return f"{self.prefix}:rate:{api_key}:{window}"
