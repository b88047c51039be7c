"""The task queue on Redis Streams, at least once: the API adds tasks, any number of workers read them
through a consumer group, answer, acknowledge; tasks of dead workers are reclaimed (XAUTOCLAIM).

A task's job hash counts its deliveries, however they happen (a first read, a worker's replay of its own
entries after an outage, a reclaim), and one delivered more than max_deliveries times fails and goes to the
dead-letter stream. A request's keys are deleted once the API has read its answer; a job's are kept for
result_ttl_s, its outputs in a list that GET /jobs/{id} reads a page at a time."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import threading
import time
from collections.abc import Awaitable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import redis
import redis.asyncio as aioredis
import redis.asyncio.retry
import redis.retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from service import redis_scripts
from service.errors import QueueFull, RequestTimeout, Unavailable
from service.keys import Keys
from service.queue import SourceUnavailable, admission_stats, batch_stats
from service.settings import ServiceSettings
from service.tasks import ErrorKind, JobState, Output, Task, TaskResult, TaskStatus

log = logging.getLogger("service")
DOWN = (RedisConnectionError, RedisTimeoutError, OSError)
T = TypeVar("T")
GONE = "the queue (Redis) is unreachable"
ACTIVE = (TaskStatus.queued.value, TaskStatus.running.value)
# An API process's Redis connections: commands in flight at once; more wait up to POOL_WAIT_S for one. A waiting
# request holds none (one listener per process wakes them all), so a thousand requests in flight need a few.
MAX_CONNECTIONS = 64
POOL_WAIT_S = 10.0
ANSWER_POLL_S = 2.0  # a waiting request also looks at its task this often, in case its notification was lost,
ANSWER_POLLS_PER_S = 50.0  # or less often when many wait: all of them together look at most this often a second
LISTEN_RETRY_S = 0.5  # the listener's pause before it subscribes again after losing Redis


def _text(v: bytes | str | None) -> str | None:
    return v.decode() if isinstance(v, bytes) else v


def request_ttl(settings: ServiceSettings) -> int:
    """How long a request's keys live if its API process died before reading the answer."""
    return math.ceil(settings.request_timeout_s) + 60


class RedisQueue:
    """The API's side (asyncio). Redis errors become 503 Unavailable; a stale pooled connection (Redis
    restarted) is retried once on a new one, so the first request after a restart is answered.

    A request waits without a connection of its own: the worker's FINISH publishes the id of every request that
    ends, and one listener per process (subscribed before the first request is added) wakes its waiter, which
    then reads and deletes the answer in one step. Reconnected, the listener wakes every waiter, so a notification
    lost meanwhile costs nothing; one lost otherwise costs at most poll_s(), the pause after which a waiter looks
    at its task unwoken."""

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
            name: self.r.register_script(getattr(redis_scripts, name))
            for name in ("SUBMIT", "TAKE", "CANCEL", "THROTTLE")
        }
        self.waiting: dict[str, asyncio.Event] = {}  # request id -> set when its answer may be there
        self.listener: asyncio.Task[None] | None = None
        self.subscribed = asyncio.Event()

    async def _call(self, aw: Awaitable[T]) -> T:
        """A Redis command; Unavailable when Redis is down. redis-py's asyncio client sometimes swallows a
        cancellation that comes during a command (redis/redis-py#2028, #2551): it is raised here instead, or the
        request of a client that went away would go on waiting until its timeout, for nobody."""
        task = asyncio.current_task()
        cancels = task.cancelling() if task is not None else 0
        try:
            result = await aw
        except DOWN as e:
            log.warning("%s: %s", GONE, e)  # the address stays in the log, never in an answer
            raise Unavailable(GONE, retry_after=2) from e
        if task is not None and task.cancelling() > cancels:
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
                    elif message["type"] == "message" and (waiter := self.waiting.get(_text(message["data"]) or "")):
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

    async def submit(self, task: Task) -> None:
        k = self.keys
        ttl = self.s.result_ttl_s if task.kind == "job" else request_ttl(self.s)
        fields = {
            "kind": task.kind,
            "status": TaskStatus.queued.value,
            "done": 0,
            "total": len(task.texts),
            "model": task.model,
            "owner": task.owner or "",
        }
        request = task.kind == "request"
        if request:  # waited on from before it is added: its notification cannot come first
            await self._listening()
            self.waiting[task.id] = asyncio.Event()
        try:
            depth = int(
                await self._call(
                    self.scripts["SUBMIT"](
                        keys=[k.stream, k.job(task.id)],
                        args=[self.s.max_queue, ttl, task.to_json(), *(x for kv in fields.items() for x in kv)],
                    )
                )
            )
        except BaseException:
            self.waiting.pop(task.id, None)
            raise
        if depth >= 0:
            self.waiting.pop(task.id, None)
            raise QueueFull(f"the queue is full ({depth} tasks); try again shortly", 1)

    def poll_s(self) -> float:
        """How long a waiter sleeps before it looks at its task unwoken: ANSWER_POLL_S, or longer when many wait, so
        that a deep queue's waiters do not keep the API and Redis busy looking (1,000 waiters: 20 s)."""
        return max(ANSWER_POLL_S, len(self.waiting) / ANSWER_POLLS_PER_S)

    async def wait(self, task_id: str, timeout: float) -> TaskResult:
        """Block until the task is answered; 504 after timeout, 503 when Redis is down or lost the task."""
        k, deadline = self.keys, time.monotonic() + timeout
        event = self.waiting.get(task_id)
        if event is None:  # not added by this process's submit: look at once
            event = self.waiting[task_id] = asyncio.Event()
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
                answer: Any = await self._call(self.scripts["TAKE"](keys=[k.job(task_id), k.results(task_id)]))
                if answer is not None:
                    break
                if time.monotonic() >= deadline:
                    await self._call(self.scripts["CANCEL"](keys=[k.job(task_id)]))
                    raise RequestTimeout(f"no answer within {timeout:g} s; the service is overloaded")
        except asyncio.CancelledError:  # the client went away: the workers drop the task
            with contextlib.suppress(*DOWN):
                await self.scripts["CANCEL"](keys=[k.job(task_id)])
            raise
        finally:
            self.waiting.pop(task_id, None)
        if answer[0] == b"lost":
            raise Unavailable("the queue lost this request (Redis restarted); send it again", retry_after=1)
        _, error, kind, raw = answer
        return TaskResult(
            [Output.from_json(o) for o in raw], _text(error) or None, "too_large" if kind == b"too_large" else "failed"
        )

    async def state(self, task_id: str, owner: str | None, offset: int = 0, limit: int = 0) -> JobState | None:
        async def get() -> tuple[dict[bytes, bytes], list[bytes]]:
            async with self.r.pipeline(transaction=False) as p:
                p.hgetall(self.keys.job(task_id))
                p.lrange(self.keys.results(task_id), offset, offset + limit - 1)
                h, raw = await p.execute()
            return h, (raw if limit > 0 else [])

        h, raw = await self._call(get())
        f = {_text(a): _text(b) for a, b in h.items()}
        if f.get("kind") != "job" or (f.get("owner") or None) != owner:
            return None
        status = TaskStatus(f.get("status") or "queued")
        outputs = [Output.from_json(o) for o in raw] if status is TaskStatus.done else None
        return JobState(
            task_id,
            status,
            int(f.get("done") or 0),
            int(f.get("total") or 0),
            f.get("model") or "",
            f.get("error") or None,
            outputs,
            offset,
        )

    async def cancel(self, task_id: str, owner: str | None) -> JobState | None:
        before = await self.state(task_id, owner)
        if before is None:
            return None
        k = self.keys
        if before.status.value in ACTIVE:  # the worker drops it at its next check; a late answer is refused
            await self._call(self.scripts["CANCEL"](keys=[k.job(task_id)]))
        else:
            await self._call(self.r.delete(k.job(task_id), k.results(task_id)))
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
                **{_text(a) or "": float(b) for a, b in counters.items()},
                "queued": float(max(0, int(length) - in_flight)),
                "workers": float(len(names)),
                "in_flight_tasks": float(sum(b.get("tasks", 0) for b in beats)),
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


class RedisWorkSource:
    """A worker's side (blocking). Connection errors become SourceUnavailable, which the worker waits out.
    Heartbeats come from a thread of their own, so that a batch of any length is never reclaimed from a
    live worker."""

    def __init__(self, settings: ServiceSettings, beat_every_s: float = 2.0) -> None:
        assert settings.redis_url is not None
        self.s = settings
        self.keys = Keys(settings.queue_prefix)
        self.name = settings.worker_name
        self.r = redis.Redis.from_url(
            settings.redis_url, socket_timeout=10, socket_connect_timeout=2, retry=redis.retry.Retry(NoBackoff(), 1)
        )
        self.scripts = {
            name: self.r.register_script(getattr(redis_scripts, name)) for name in ("FINISH", "START", "PROGRESS")
        }
        self.lock = threading.Lock()
        self.entries: dict[str, bytes] = {}  # task id -> stream entry id, for the tasks in flight here
        self.unwanted_ids: set[str] = set()  # of those, the ones the heartbeat found cancelled or gone
        self.load = (0, 0)
        self.replayed = False
        self.max_result_bytes = settings.max_result_bytes
        self.admitted: dict[str, float] = {}  # admission counters, sent with the next step's (record_batch)
        self.beat_every_s = beat_every_s
        self.stopping = threading.Event()
        self.heart = threading.Thread(target=self._beat_forever, name="heartbeat", daemon=True)

    def start(self) -> None:
        """Create the consumer group if need be, learn Redis's size limits, start the heartbeat thread."""
        with self._redis():
            self.ensure_group()
        try:
            config: Any = self.r.config_get("proto-max-bulk-len")
            bulk = int(config.get("proto-max-bulk-len", 0) or 0)
            if bulk:
                self.max_result_bytes = min(self.max_result_bytes, bulk)
        except (ResponseError, *DOWN) as e:  # CONFIG may be forbidden (managed Redis): keep the setting
            log.info(
                "could not read proto-max-bulk-len (%s); results are limited to %d bytes", e, self.max_result_bytes
            )
        self.heart.start()

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
                    return self._take(mine[0][1])
            block = int(block_s * 1000)
            got: Any = self.r.xreadgroup(k.group, self.name, {k.stream: ">"}, count=count, block=block or None)
            return self._take(got[0][1]) if got else []

    def _take(self, entries: list[tuple[bytes, dict[bytes, bytes]]]) -> list[Task]:
        """Parse delivered entries and count the delivery; drop the unreadable, the cancelled and the
        expired ones, and dead-letter those delivered too often."""
        tasks: list[tuple[bytes, Task]] = []
        for entry_id, fields in entries:
            if not fields:
                continue  # deleted while pending
            try:
                tasks.append((entry_id, Task.from_json(fields[b"task"])))
            except (KeyError, ValueError, TypeError) as e:
                log.error("dropping unreadable stream entry %s: %s", entry_id, e)
                self._ack(entry_id)
        statuses = self.r.pipeline(transaction=False)
        for _, t in tasks:
            statuses.hget(self.keys.job(t.id), "status")
        live = []
        for (entry_id, t), status in zip(tasks, statuses.execute(), strict=True):
            if _text(status) in ACTIVE:
                live.append((entry_id, t))
            else:
                self._ack(entry_id)  # cancelled, or its request expired
        counts = self.r.pipeline(transaction=False)
        for _, t in live:
            counts.hincrby(self.keys.job(t.id), "deliveries", 1)
        keep = []
        for (entry_id, t), times in zip(live, counts.execute(), strict=True):
            with self.lock:
                self.entries[t.id] = entry_id
            if int(times) <= self.s.max_deliveries:
                keep.append(t)
            else:
                self._dead_letter(t, f"delivered {times} times without an answer (workers crashed on it)")
        return keep

    def _ack(self, entry_id: bytes) -> None:
        p = self.r.pipeline(transaction=True)
        p.xack(self.keys.stream, self.keys.group, entry_id)
        p.xdel(self.keys.stream, entry_id)
        p.execute()

    def _dead_letter(self, task: Task, reason: str, kind: ErrorKind = "failed") -> None:
        """Fail a task for good: its reason goes to the client and, with the task, to the dead-letter stream."""
        log.error("task %s: %s", task.id, reason)
        self.r.xadd(self.keys.dead, {"task": task.to_json(), "reason": reason}, maxlen=10000, approximate=True)
        self.finish(task, TaskResult(error=reason, error_kind=kind))

    def maintain(self) -> list[Task]:
        """Reclaim the tasks of dead workers (idle longer than claim_idle_ms: live workers touch theirs)."""
        k = self.keys
        with self._redis():
            reply: Any = self.r.xautoclaim(k.stream, k.group, self.name, self.s.claim_idle_ms, "0-0", count=100)
            claimed = [e for e in reply[1] if e[1]]
            return self._take(claimed) if claimed else []

    def unwanted(self, task_ids: list[str]) -> set[str]:
        with self.lock:
            return self.unwanted_ids.intersection(task_ids)

    def started(self, task: Task) -> None:
        with self._redis():
            self.scripts["START"](keys=[self.keys.job(task.id)], args=[self.name])

    def progress(self, task: Task, done: int) -> None:
        with self._redis():
            self.scripts["PROGRESS"](keys=[self.keys.job(task.id)], args=[done])

    def finish(self, task: Task, result: TaskResult) -> None:
        """Answer once (a task already answered, cancelled or abandoned is not answered again), acknowledge,
        wake the waiting API. A result too large for Redis fails the task and goes to the dead letters."""
        outputs = [o.to_json() for o in result.outputs]
        size = sum(len(o.encode()) for o in outputs)
        if size > self.max_result_bytes:
            reason = (
                f"the result is {size} bytes, more than the queue takes ({self.max_result_bytes}; "
                "TRANSFORMER_MAX_RESULT_BYTES): ask for less"
            )
            with self._redis():
                self._dead_letter(task, reason, "too_large")
            return
        k = self.keys
        status = TaskStatus.failed if result.error else TaskStatus.done
        ttl = self.s.result_ttl_s if task.kind == "job" else request_ttl(self.s)
        with self.lock:
            entry_id = self.entries.pop(task.id, b"")
            self.unwanted_ids.discard(task.id)
        with self._redis():
            self.scripts["FINISH"](
                keys=[k.job(task.id), k.results(task.id), k.stream],
                args=[
                    status.value,
                    result.error or "",
                    result.error_kind,
                    len(outputs),
                    ttl,
                    k.group,
                    entry_id,
                    k.answered if task.kind == "request" else "",
                    task.id,
                    *outputs,
                ],
            )

    def drop(self, task: Task) -> None:
        with self.lock:
            entry_id = self.entries.pop(task.id, None)
            self.unwanted_ids.discard(task.id)
        if entry_id is not None:
            with self._redis():
                self._ack(entry_id)

    def busy(self, tasks: int, texts: int) -> None:
        self.load = (tasks, texts)

    def record_batch(self, sentences: int, finished: int, seconds: float) -> None:
        increments = batch_stats(sentences, finished, seconds)
        for name, v in self.admitted.items():
            increments[name] = increments.get(name, 0.0) + v
        with self._redis():
            p = self.r.pipeline(transaction=False)
            for name, v in increments.items():
                p.hincrbyfloat(self.keys.stats, name, v)
            p.execute()
        self.admitted = {}

    def record_admission(self, texts: int, seconds: float) -> None:
        """Counted here and sent with the step that follows it (a step always does), not a round trip of its own."""
        for name, v in admission_stats(texts, seconds).items():
            self.admitted[name] = self.admitted.get(name, 0.0) + v

    # -- the heartbeat thread --------------------------------------------------------------------

    def _beat_forever(self) -> None:
        while not self.stopping.wait(self.beat_every_s):
            try:
                self.beat()
            except (*DOWN, ResponseError) as e:  # the main loop notices an outage and waits it out
                log.debug("heartbeat failed: %s", e)

    def beat(self) -> None:
        """Say this worker lives, touch its tasks in flight (resetting their idle time, so that nobody
        reclaims them) and note which of them were cancelled or abandoned."""
        k = self.keys
        with self.lock:
            in_flight = dict(self.entries)
        tasks, texts = self.load
        p = self.r.pipeline(transaction=False)
        p.set(
            k.worker(self.name),
            json.dumps({"tasks": tasks, "texts": texts}),
            ex=max(10, 3 * self.s.claim_idle_ms // 1000),
        )
        if in_flight:
            p.xclaim(k.stream, k.group, self.name, 0, list(in_flight.values()), justid=True)
        for task_id in in_flight:
            p.hget(k.job(task_id), "status")
        replies = p.execute()
        statuses = replies[2:] if in_flight else []
        gone = {t for t, status in zip(in_flight, statuses, strict=True) if _text(status) not in ACTIVE}
        with self.lock:
            self.unwanted_ids = gone

    def close(self) -> None:
        self.stopping.set()
        if self.heart.is_alive():
            self.heart.join(timeout=5)
        with self._redis():
            self.r.delete(self.keys.worker(self.name))
        self.r.close()
