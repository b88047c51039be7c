"""The task queue on Redis Streams, at least once: the API adds tasks, any number of workers read them
through a consumer group, answer, acknowledge; tasks of dead workers are reclaimed (XAUTOCLAIM)."""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Awaitable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import redis
import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from service.errors import QueueFull, RequestTimeout, Unavailable
from service.keys import Keys
from service.queue import batch_stats
from service.settings import ServiceSettings
from service.tasks import JobState, Task, TaskResult, TaskStatus
from service.worker import SourceUnavailable

log = logging.getLogger("service")
DOWN = (RedisConnectionError, RedisTimeoutError, OSError)
T = TypeVar("T")


def _text(v: bytes | str | None) -> str | None:
    return v.decode() if isinstance(v, bytes) else v


class RedisQueue:
    """The API's side (asyncio). Redis errors become 503 Unavailable; the client reconnects by itself."""

    def __init__(self, settings: ServiceSettings) -> None:
        assert settings.redis_url is not None
        self.s = settings
        self.keys = Keys(settings.queue_prefix)
        self.r = aioredis.Redis.from_url(settings.redis_url, socket_timeout=10, socket_connect_timeout=2,
                                         health_check_interval=5)

    async def _call(self, aw: Awaitable[T]) -> T:
        try:
            return await aw
        except DOWN as e:
            raise Unavailable(f"the queue (Redis) is unreachable: {e}", retry_after=2) from e

    async def submit(self, task: Task) -> None:
        k = self.keys
        depth = await self.depth()
        if depth >= self.s.max_queue:
            raise QueueFull(f"the queue is full ({depth} tasks); try again shortly", 1)

        async def add() -> None:
            async with self.r.pipeline(transaction=True) as p:
                p.hset(k.job(task.id), mapping={"status": TaskStatus.queued.value, "done": 0,
                                                "total": len(task.texts), "model": task.model})
                p.expire(k.job(task.id), self.s.result_ttl_s)
                p.xadd(k.stream, {"task": task.to_json()})
                await p.execute()
        await self._call(add())

    async def wait(self, task_id: str, timeout: float) -> TaskResult:
        """Block until the task's result exists; 504 after timeout, 503 when Redis is down or lost the task."""
        k, deadline = self.keys, time.monotonic() + timeout
        while True:
            raw, exists = await self._call(self._result(task_id))
            if raw is not None:
                return TaskResult.from_json(raw)
            if not exists:
                raise Unavailable("the queue lost this request (Redis restarted); send it again", retry_after=1)
            left = deadline - time.monotonic()
            if left <= 0:
                await self._call(self.r.hset(k.job(task_id), "status", TaskStatus.cancelled.value))
                raise RequestTimeout(f"no answer within {timeout:g} s; the service is overloaded")
            await self._call(self.r.blpop([k.done(task_id)], timeout=min(left, 2.0)))

    async def _result(self, task_id: str) -> tuple[bytes | None, bool]:
        async with self.r.pipeline(transaction=False) as p:
            p.get(self.keys.result(task_id))
            p.exists(self.keys.job(task_id))
            raw, exists = await p.execute()
        return raw, bool(exists)

    async def state(self, task_id: str) -> JobState | None:
        async def get() -> tuple[dict[bytes, bytes], bytes | None]:
            async with self.r.pipeline(transaction=False) as p:
                p.hgetall(self.keys.job(task_id))
                p.get(self.keys.result(task_id))
                h, raw = await p.execute()
            return h, raw
        h, raw = await self._call(get())
        if not h:
            return None
        f = {_text(a): _text(b) for a, b in h.items()}
        result = TaskResult.from_json(raw) if raw else None
        status = TaskStatus(f.get("status") or "queued")
        return JobState(task_id, status, int(f.get("done") or 0), int(f.get("total") or 0), f.get("model") or "",
                        f.get("error") or None, result)

    async def depth(self) -> int:
        return int(await self._call(self.r.xlen(self.keys.stream)))

    async def ping(self) -> None:
        await self._call(self.r.ping())

    async def stats(self) -> dict[str, float]:
        h = await self._call(self.r.hgetall(self.keys.stats))
        out = {_text(a) or "": float(b) for a, b in h.items()}

        async def workers() -> int:
            return len([w async for w in self.r.scan_iter(match=self.keys.workers_pattern(), count=100)])
        out["workers"] = float(await self._call(workers()))
        return out

    async def hit(self, key: str) -> int:
        window = int(time.time() // 60)
        name = self.keys.rate(hashlib.sha256(key.encode()).hexdigest()[:16], window)

        async def incr() -> int:
            async with self.r.pipeline(transaction=True) as p:
                p.incr(name)
                p.expire(name, 120)
                n, _ = await p.execute()
            return int(n)
        return int(await self._call(incr()))

    async def close(self) -> None:
        await self.r.aclose()


class RedisWorkSource:
    """A worker's side (blocking). Connection errors become SourceUnavailable, which the worker waits out."""

    def __init__(self, settings: ServiceSettings) -> None:
        assert settings.redis_url is not None
        self.s = settings
        self.keys = Keys(settings.queue_prefix)
        self.name = settings.worker_name
        self.r = redis.Redis.from_url(settings.redis_url, socket_timeout=10, socket_connect_timeout=2)
        self.entries: dict[str, bytes] = {}  # task id -> stream entry id
        self.replayed = False

    @contextmanager
    def _redis(self) -> Iterator[None]:
        try:
            yield
        except DOWN as e:
            self.replayed = False
            raise SourceUnavailable(str(e)) from e
        except ResponseError as e:
            if "NOGROUP" not in str(e):
                raise
            self.ensure_group()  # Redis lost the stream (restart): start over
            self.replayed = False
            raise SourceUnavailable("consumer group was missing; created it") from e

    def ensure_group(self) -> None:
        """Create the consumer group from the stream's start, so tasks added before it are read too."""
        try:
            self.r.xgroup_create(self.keys.stream, self.keys.group, id="0", mkstream=True)
        except ResponseError as e:
            if "BUSYGROUP" not in str(e):
                raise

    def read(self, count: int, block_s: float) -> list[Task]:
        k = self.keys
        with self._redis():
            if not self.replayed:  # after a start or an outage: my own unacknowledged tasks first
                self.ensure_group()
                self.replayed = True
                mine: Any = self.r.xreadgroup(k.group, self.name, {k.stream: "0"}, count=1000)
                if mine and mine[0][1]:
                    return self._tasks(mine[0][1])
            block = int(block_s * 1000)
            got: Any = self.r.xreadgroup(k.group, self.name, {k.stream: ">"}, count=count, block=block or None)
            return self._tasks(got[0][1]) if got else []

    def _tasks(self, entries: list[tuple[bytes, dict[bytes, bytes]]]) -> list[Task]:
        """Parse entries; drop unreadable ones and those whose request was cancelled or expired."""
        tasks = []
        for entry_id, fields in entries:
            if not fields:
                continue  # deleted while pending
            try:
                task = Task.from_json(fields[b"task"])
            except (KeyError, ValueError, TypeError) as e:
                log.error("dropping unreadable stream entry %s: %s", entry_id, e)
                self._ack(entry_id)
                continue
            self.entries[task.id] = entry_id
            tasks.append(task)
        if not tasks:
            return []
        statuses = self.r.pipeline(transaction=False)
        for t in tasks:
            statuses.hget(self.keys.job(t.id), "status")
        keep = []
        for t, status in zip(tasks, statuses.execute(), strict=True):
            if status in (None, TaskStatus.cancelled.value.encode()):
                self._ack(self.entries.pop(t.id))
            else:
                keep.append(t)
        return keep

    def _ack(self, entry_id: bytes) -> None:
        p = self.r.pipeline(transaction=True)
        p.xack(self.keys.stream, self.keys.group, entry_id)
        p.xdel(self.keys.stream, entry_id)
        p.execute()

    def maintain(self, in_flight: list[str]) -> list[Task]:
        """Beat, touch my tasks in flight (resetting their idle time), reclaim the dead's."""
        k = self.keys
        with self._redis():
            self.r.set(k.worker(self.name), str(time.time()), ex=max(10, 3 * self.s.claim_idle_ms // 1000))
            ids = [self.entries[t] for t in in_flight if t in self.entries]
            if ids:
                self.r.xclaim(k.stream, k.group, self.name, 0, list[Any](ids), justid=True)
            reply: Any = self.r.xautoclaim(k.stream, k.group, self.name, self.s.claim_idle_ms, "0-0", count=100)
            claimed = [e for e in reply[1] if e[1]]
            return self._tasks(self._dead_letter(claimed)) if claimed else []

    def _dead_letter(self, entries: list[tuple[bytes, dict[bytes, bytes]]]) -> list[tuple[bytes, dict[bytes, bytes]]]:
        """Fail entries delivered more than max_deliveries times; return the others."""
        keep = []
        for entry_id, fields in entries:
            info = self.r.xpending_range(self.keys.stream, self.keys.group, min=entry_id, max=entry_id, count=1)
            times = int(info[0]["times_delivered"]) if info else 1
            if times <= self.s.max_deliveries:
                keep.append((entry_id, fields))
                continue
            reason = f"delivered {times} times without an answer (workers crashed on it)"
            log.error("task entry %s: %s", entry_id, reason)
            dead: dict[Any, Any] = {**fields, b"reason": reason.encode()}
            self.r.xadd(self.keys.dead, dead, maxlen=10000, approximate=True)
            try:
                task = Task.from_json(fields[b"task"])
            except (KeyError, ValueError, TypeError):
                self._ack(entry_id)
                continue
            self.entries[task.id] = entry_id
            self.finish(task, TaskResult(error=reason))
        return keep

    def started(self, task: Task) -> None:
        with self._redis():
            self.r.hset(self.keys.job(task.id), mapping={"status": TaskStatus.running.value, "worker": self.name})

    def progress(self, task: Task, done: int) -> None:
        with self._redis():
            self.r.hset(self.keys.job(task.id), "done", done)

    def finish(self, task: Task, result: TaskResult) -> None:
        """Answer once (the first answer wins: SET NX), then acknowledge and wake the waiting API."""
        k, ttl = self.keys, self.s.result_ttl_s
        status = TaskStatus.failed if result.error else TaskStatus.done
        with self._redis():
            p = self.r.pipeline(transaction=True)
            p.set(k.result(task.id), result.to_json(), ex=ttl, nx=True)
            p.hset(k.job(task.id), mapping={"status": status.value, "done": len(result.outputs),
                                            "error": result.error or ""})
            p.expire(k.job(task.id), ttl)
            p.rpush(k.done(task.id), 1)
            p.expire(k.done(task.id), ttl)
            entry_id = self.entries.pop(task.id, None)
            if entry_id is not None:
                p.xack(k.stream, k.group, entry_id)
                p.xdel(k.stream, entry_id)
            p.execute()

    def record_batch(self, sentences: int, tokens: int, seconds: float) -> None:
        with self._redis():
            p = self.r.pipeline(transaction=False)
            for name, v in batch_stats(sentences, tokens, seconds).items():
                p.hincrbyfloat(self.keys.stats, name, v)
            p.execute()

    def close(self) -> None:
        with self._redis():
            self.r.delete(self.keys.worker(self.name))
        self.r.close()
