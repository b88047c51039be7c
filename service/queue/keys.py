"""The queue's layout in Redis: every key name the service uses (all start with the configured prefix), and
what both of its sides (service.queue.redis_api, service.queue.redis_worker) read the same way."""

from __future__ import annotations

import math
from dataclasses import dataclass

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from service.queue.contract import ACTIVE
from service.settings import ServiceSettings

DOWN = (RedisConnectionError, RedisTimeoutError, OSError)  # what an unreachable Redis raises
LIVE = tuple(status.value for status in ACTIVE)  # a job hash's status while it is queued or running


def text(v: bytes | str | None) -> str | None:
    """A Redis reply as text."""
    return v.decode() if isinstance(v, bytes) else v


def ttl(settings: ServiceSettings, background: bool) -> int:
    """How long a job's keys live: a background job's for result_ttl_s; a request's, if its API process died
    before reading the answer, until its timeout and a minute more."""
    return settings.result_ttl_s if background else math.ceil(settings.request_timeout_s) + 60


@dataclass(frozen=True)
class Keys:
    prefix: str = "transformer"

    @property
    def stream(self) -> str:
        """The job stream: one entry per job, field "job" holding its JSON."""
        return f"{self.prefix}:jobs"

    @property
    def group(self) -> str:
        """The workers' consumer group on the stream."""
        return f"{self.prefix}:workers"

    @property
    def dead(self) -> str:
        """Dead-letter stream: jobs delivered too many times, or whose answer is too large."""
        return f"{self.prefix}:dead"

    @property
    def stats(self) -> str:
        """Hash of counters the workers add to (batches, sentences, tokens, seconds)."""
        return f"{self.prefix}:stats"

    def job(self, job_id: str) -> str:
        """Hash: background ("1" or "0"), status, done, total, error, too_large, model, owner, worker,
        deliveries."""
        return f"{self.job_prefix()}{job_id}"

    def job_prefix(self) -> str:
        """What every job hash's name starts with (the kept jobs' check finds a job's hash by it)."""
        return f"{self.prefix}:job:"

    def file(self, job_id: str) -> str:
        """String: a file job's file (POST /translate_file), until it is downloaded."""
        return f"{self.prefix}:file:{job_id}"

    def kept(self, owner: str | None) -> str:
        """Hash: job id -> bytes of the background jobs an owner (an API key's owner_of; "" without keys) keeps."""
        return f"{self.prefix}:kept:{owner or ''}"

    def outputs(self, job_id: str) -> str:
        """List: one Output JSON per text, in order (pages of a background job are LRANGEs of it)."""
        return f"{self.prefix}:outputs:{job_id}"

    @property
    def answered(self) -> str:
        """Channel (not a key): the id of every request's job that ends is published here; each API process
        listens once and wakes the requests it is waiting for."""
        return f"{self.prefix}:answered"

    def worker(self, name: str) -> str:
        """A worker's heartbeat, JSON {"jobs", "texts"} in flight (expires when the worker stops beating)."""
        return f"{self.prefix}:worker:{name}"

    def workers_pattern(self) -> str:
        return f"{self.prefix}:worker:*"

    def bucket(self, name: str) -> str:
        """Hash: a token bucket (tokens, ms), named key:OWNER (rate limit) or auth:ADDRESS (failed keys)."""
        return f"{self.prefix}:bucket:{name}"
