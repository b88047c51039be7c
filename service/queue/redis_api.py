"""The API's side of the queue on Redis Streams, at least once: the API adds jobs, any number of workers read them
through a consumer group (service.queue.redis_worker), answer, acknowledge; jobs of dead workers are reclaimed.

A request's keys are deleted once the API has read its answer; a background job's are kept for result_ttl_s,
its outputs in a list that GET /jobs/{id} reads a page at a time."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Awaitable
from typing import Any, TypeVar

import redis.asyncio as aioredis
import redis.asyncio.retry
from redis.backoff import NoBackoff

from service.errors import QueueFull, RequestTimeout, Unavailable
from service.queue import scripts
from service.queue.contract import Answer, Job, JobInfo, JobStatus, check_kept, outputs_of
from service.queue.keys import DOWN, LIVE, Keys, text, ttl
from service.settings import ServiceSettings

log = logging.getLogger("service")
T = TypeVar("T")
GONE = "the queue (Redis) is unreachable"
# An API process's Redis connections: commands in flight at once; more wait up to POOL_WAIT_S for one. A waiting
# request holds none (one listener per process wakes them all), so a thousand requests in flight need a few.
MAX_CONNECTIONS = 64
POOL_WAIT_S = 10.0
ANSWER_POLL_S = 2.0  # a waiting request also looks at its job this often, in case its notification was lost,
ANSWER_POLLS_PER_S = 50.0  # or less often when many wait: all of them together look at most this often a second
LISTEN_RETRY_S = 0.5  # the listener's pause before it subscribes again after losing Redis


class RedisApiQueue:
    """The API's side (asyncio), an ApiQueue. Redis errors become 503 Unavailable; a stale pooled connection (Redis
    restarted) is retried once on a new one, so the first request after a restart is answered.

    A request waits without a connection of its own: the worker's FINISH publishes the id of every request's job
    that ends, and one listener per process (subscribed before the first request is added) wakes its waiter, which
    then reads and deletes the answer in one step. Reconnected, the listener wakes every waiter, so a notification
    lost meanwhile costs nothing; one lost otherwise costs at most poll_s(), the pause after which a waiter looks
    at its job unwoken."""

    def __init__(self, settings: ServiceSettings) -> None:
        assert settings.redis_url is not None
        self.s = settings
        self.keys = Keys(settings.queue_prefix)
        pool = aioredis.BlockingConnectionPool.from_url(
            settings.redis_url,
            max_connections=MAX_CONNECTIONS,
            timeout=POOL_WAIT_S,
            socket_timeout=10,
            socket_connect_timeout=2,
            health_check_interval=5,
            retry=redis.asyncio.retry.Retry(NoBackoff(), 1),
        )
        self.r = aioredis.Redis.from_pool(pool)
        self.scripts = {
            name: self.r.register_script(getattr(scripts, name)) for name in ("SUBMIT", "TAKE", "CANCEL", "THROTTLE")
        }
        self.waiting: dict[str, asyncio.Event] = {}  # a request's job id -> set when its answer may be there
        self.listener: asyncio.Task[None] | None = None
        self.subscribed = asyncio.Event()

    async def _call(self, aw: Awaitable[T]) -> T:
        """A Redis command; Unavailable when Redis is down. redis-py's asyncio client sometimes swallows a
        cancellation that comes during a command (redis/redis-py#2028, #2551): it is raised here instead, or the
        request of a client that went away would go on waiting until its timeout, for nobody."""
        current = asyncio.current_task()
        cancels = current.cancelling() if current is not None else 0
        try:
            result = await aw
        except DOWN as e:
            log.warning("%s: %s", GONE, e)  # the address stays in the log, never in an answer
            raise Unavailable(GONE, retry_after=2) from e
        if current is not None and current.cancelling() > cancels:
            raise asyncio.CancelledError
        return result

    async def _listen(self) -> None:
        """Wake the waiting requests whose ids FINISH publishes; subscribe again whenever Redis is lost."""
        while True:
            pubsub = self.r.pubsub()
            try:
                await pubsub.subscribe(self.keys.answered)
                while True:
                    message = await pubsub.get_message(timeout=1.0)
                    if message is None:
                        continue
                    if message["type"] == "subscribe":
                        self.subscribed.set()
                        for event in self.waiting.values():  # whatever ended while we were away
                            event.set()
                    elif message["type"] == "message" and (waiter := self.waiting.get(text(message["data"]) or "")):
                        waiter.set()
            except DOWN as e:
                log.warning("%s (listening for answers): %s", GONE, e)
            finally:
                self.subscribed.clear()
                with contextlib.suppress(*DOWN):
                    await pubsub.aclose()
            await asyncio.sleep(LISTEN_RETRY_S)

    async def _listening(self) -> None:
        """Start the listener with the first request, and give its subscription a moment to be confirmed."""
        if self.listener is None or self.listener.done():
            self.listener = asyncio.create_task(self._listen(), name="redis-answers")
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(1.0):
                    await self.subscribed.wait()

    async def submit(self, job: Job, file: bytes | None = None) -> None:
        k, s = self.keys, self.s
        fields: dict[str, str | int] = {
            "background": int(job.background),
            "status": JobStatus.queued.value,
            "done": 0,
            "total": len(job.texts),
            "model": job.model or "",
            "owner": job.owner or "",
            "file": job.file or "",
        }
        if not job.background:  # waited on from before it is added: its notification cannot come first
            await self._listening()
            self.waiting[job.id] = asyncio.Event()
        try:
            args = [
                s.max_queue,
                ttl(s, job.background),
                job.to_json(),
                s.max_kept_jobs if job.background else 0,
                s.max_kept_bytes,
                job.kept_bytes(file),
                k.job_prefix(),
                file or b"",
                *(x for kv in fields.items() for x in kv),
            ]
            keys = [k.stream, k.job(job.id), k.kept(job.owner), k.file(job.id)]
            added: Any = await self._call(self.scripts["SUBMIT"](keys=keys, args=args))
        except BaseException:
            self.waiting.pop(job.id, None)
            raise
        if isinstance(added, list):  # the owner keeps as much as it may
            check_kept(int(added[0]), int(added[1]), job.kept_bytes(file), s.max_kept_jobs, s.max_kept_bytes)
        if isinstance(added, list) or int(added) >= 0:
            self.waiting.pop(job.id, None)
            raise QueueFull(f"the queue is full ({added} jobs); try again shortly", 1)

    def poll_s(self) -> float:
        """How long a waiter sleeps before it looks at its job unwoken: ANSWER_POLL_S, or longer when many wait, so
        that a deep queue's waiters do not keep the API and Redis busy looking (1,000 waiters: 20 s)."""
        return max(ANSWER_POLL_S, len(self.waiting) / ANSWER_POLLS_PER_S)

    async def wait(self, job_id: str, timeout: float) -> Answer:
        """Block until the job is answered; 504 after timeout, 503 when Redis is down or lost the job."""
        k, deadline = self.keys, time.monotonic() + timeout
        event = self.waiting.get(job_id)
        if event is None:  # not added by this process's submit: look at once
            event = self.waiting[job_id] = asyncio.Event()
            event.set()
        try:
            while True:
                left = deadline - time.monotonic()
                if not event.is_set() and left > 0:
                    # asyncio.timeout, not wait_for: on Python 3.11 wait_for swallows a cancellation that comes as
                    # the event is set (python/cpython#86296), and this loop would go on for a client long gone
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(min(left, self.poll_s())):
                            await event.wait()
                event.clear()
                answer: Any = await self._call(self.scripts["TAKE"](keys=[k.job(job_id), k.outputs(job_id)]))
                if answer is not None:
                    break
                if time.monotonic() >= deadline:
                    await self._call(self.scripts["CANCEL"](keys=[k.job(job_id)]))
                    raise RequestTimeout(f"no answer within {timeout:g} s; the service is overloaded")
        except asyncio.CancelledError:  # the client went away: the workers drop the job
            with contextlib.suppress(*DOWN):
                await self.scripts["CANCEL"](keys=[k.job(job_id)])
            raise
        finally:
            self.waiting.pop(job_id, None)
        if answer[0] == b"lost":
            raise Unavailable("the queue lost this request (Redis restarted); send it again", retry_after=1)
        _, error, too_large, attention, outputs = answer
        return Answer(outputs_of(outputs), text(attention) or None, text(error) or None, too_large == b"1")

    async def info(self, job_id: str, owner: str | None, offset: int = 0, limit: int = 0) -> JobInfo | None:
        async def get() -> tuple[dict[bytes, bytes], list[bytes]]:
            async with self.r.pipeline(transaction=False) as p:
                p.hgetall(self.keys.job(job_id))
                p.lrange(self.keys.outputs(job_id), offset, offset + limit - 1)
                h, raw = await p.execute()
            return h, (raw if limit > 0 else [])

        h, raw = await self._call(get())
        f = {text(a): text(b) for a, b in h.items()}
        if f.get("background") != "1" or (f.get("owner") or None) != owner:
            return None
        status = JobStatus(f.get("status") or "queued")
        outputs = outputs_of(raw) if status is JobStatus.done else None
        done, total, model = int(f.get("done") or 0), int(f.get("total") or 0), f.get("model") or None
        return JobInfo(
            job_id, status, done, total, model, f.get("error") or None, outputs, offset, f.get("file") or None
        )

    async def take_file(self, job_id: str, owner: str | None) -> bytes | None:
        if await self.info(job_id, owner) is None:
            return None
        file: Any = await self._call(self.r.getdel(self.keys.file(job_id)))
        return file if isinstance(file, bytes) else None

    async def cancel(self, job_id: str, owner: str | None) -> JobInfo | None:
        before = await self.info(job_id, owner)
        if before is None:
            return None
        k = self.keys
        if before.status.value in LIVE:  # the worker drops it at its next check; a late answer is refused
            await self._call(self.scripts["CANCEL"](keys=[k.job(job_id)]))
        else:
            await self._call(self.r.delete(k.job(job_id), k.outputs(job_id), k.file(job_id)))
        return before

    async def ping(self) -> None:
        await self._call(self.r.ping())

    async def stats(self) -> dict[str, float]:
        async def read() -> dict[str, float]:
            k = self.keys
            async with self.r.pipeline(transaction=False) as p:
                p.hgetall(k.stats)
                p.xlen(k.stream)
                p.xpending(k.stream, k.group)
                counters, length, pending = await p.execute(raise_on_error=False)  # no group before a worker
            names = [w async for w in self.r.scan_iter(match=k.workers_pattern(), count=100)]
            beats = [json.loads(b) for b in (await self.r.mget(names) if names else []) if b]
            in_flight = int(pending["pending"]) if isinstance(pending, dict) else 0
            counters = counters if isinstance(counters, dict) else {}
            return {
                **{text(a) or "": float(b) for a, b in counters.items()},
                "queued": float(max(0, int(length) - in_flight)),
                "workers": float(len(names)),
                "in_flight_jobs": float(sum(b.get("jobs", 0) for b in beats)),
                "in_flight_texts": float(sum(b.get("texts", 0) for b in beats)),
            }

        return await self._call(read())

    async def throttle(self, name: str, per_minute: int, take: bool) -> float:
        ms = await self._call(self.scripts["THROTTLE"](keys=[self.keys.bucket(name)], args=[per_minute, int(take)]))
        return float(ms) / 1000.0

    async def close(self) -> None:
        if self.listener is not None:
            self.listener.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.listener
        await self.r.aclose()
