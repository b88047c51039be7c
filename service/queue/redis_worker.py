"""A worker's side of the queue on Redis Streams: it reads jobs through the workers' consumer group, answers,
acknowledges and deletes each entry in one step (scripts.FINISH), and claims the jobs of workers that died.

A job's hash counts its deliveries, however they happen (a first read, a worker's replay of its own entries after
an outage, a reclaim), and one delivered more than max_deliveries times fails and goes to the dead-letter
stream, as does one whose answer is too large for Redis."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import redis
import redis.retry
from redis.backoff import NoBackoff
from redis.exceptions import ResponseError

from service.queue import scripts
from service.queue.contract import Answer, Job, JobStatus, QueueUnavailable
from service.queue.counters import PendingCounts, admission_counts, step_counts
from service.queue.keys import DOWN, LIVE, Keys, text, ttl
from service.settings import ServiceSettings

log = logging.getLogger("service")


class RedisWorkerQueue:
    """A worker's side (blocking), a WorkerQueue. Connection errors become QueueUnavailable, which the worker
    waits out.
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
            name: self.r.register_script(getattr(scripts, name)) for name in ("FINISH", "START", "PROGRESS")
        }
        self.lock = threading.Lock()
        self.entries: dict[str, bytes] = {}  # job id -> stream entry id, for the jobs in flight here
        self.unwanted_ids: set[str] = set()  # of those, the ones the heartbeat found cancelled or gone
        self.load = (0, 0)
        self.replayed = False
        self.max_result_bytes = settings.max_result_bytes
        self.counts = PendingCounts()  # step and admission counters not yet sent (record_step)
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
            raise QueueUnavailable(str(e)) from e
        except ResponseError as e:
            if "NOGROUP" not in str(e):
                raise
            self.ensure_group()  # Redis lost the stream (restart): start over
            self.replayed = False
            raise QueueUnavailable("consumer group was missing; created it") from e

    def ensure_group(self) -> None:
        """Create the consumer group from the stream's start, so jobs added before it are read too."""
        try:
            self.r.xgroup_create(self.keys.stream, self.keys.group, id="0", mkstream=True)
        except ResponseError as e:
            if "BUSYGROUP" not in str(e):
                raise

    def read(self, count: int, block_s: float) -> list[Job]:
        k = self.keys
        with self._redis():
            if not self.replayed:  # after a start or an outage: my own unacknowledged jobs first
                self.ensure_group()
                self.replayed = True
                mine: Any = self.r.xreadgroup(k.group, self.name, {k.stream: "0"}, count=1000)
                if mine and mine[0][1]:
                    return self._take(mine[0][1])
            block = int(block_s * 1000)
            got: Any = self.r.xreadgroup(k.group, self.name, {k.stream: ">"}, count=count, block=block or None)
            return self._take(got[0][1]) if got else []

    def _take(self, entries: list[tuple[bytes, dict[bytes, bytes]]]) -> list[Job]:
        """Parse delivered entries and count the delivery; drop the unreadable, the cancelled and the
        expired ones, and dead-letter those delivered too often."""
        jobs: list[tuple[bytes, Job]] = []
        for entry_id, fields in entries:
            if not fields:
                continue  # deleted while pending
            try:
                jobs.append((entry_id, Job.from_json(fields[b"job"])))
            except (KeyError, ValueError, TypeError) as e:
                log.error("dropping unreadable stream entry %s: %s", entry_id, e)
                self._ack(entry_id)
        statuses = self.r.pipeline(transaction=False)
        for _, job in jobs:
            statuses.hget(self.keys.job(job.id), "status")
        live = []
        for (entry_id, job), status in zip(jobs, statuses.execute(), strict=True):
            if text(status) in LIVE:
                live.append((entry_id, job))
            else:
                self._ack(entry_id)  # cancelled, or its request expired
        counts = self.r.pipeline(transaction=False)
        for _, job in live:
            counts.hincrby(self.keys.job(job.id), "deliveries", 1)
        keep = []
        for (entry_id, job), times in zip(live, counts.execute(), strict=True):
            with self.lock:
                self.entries[job.id] = entry_id
            if int(times) <= self.s.max_deliveries:
                keep.append(job)
            else:
                self._dead_letter(job, f"delivered {times} times without an answer (workers crashed on it)")
        return keep

    def _ack(self, entry_id: bytes) -> None:
        p = self.r.pipeline(transaction=True)
        p.xack(self.keys.stream, self.keys.group, entry_id)
        p.xdel(self.keys.stream, entry_id)
        p.execute()

    def _dead_letter(self, job: Job, reason: str, too_large: bool = False) -> None:
        """Fail a job for good: its reason goes to the client and, with the job, to the dead-letter stream."""
        log.error("job %s: %s", job.id, reason)
        self.r.xadd(self.keys.dead, {"job": job.to_json(), "reason": reason}, maxlen=10000, approximate=True)
        self.finish(job, Answer(error=reason, too_large=too_large))

    def maintain(self) -> list[Job]:
        """Reclaim the jobs of dead workers (idle longer than claim_idle_ms: live workers touch theirs)."""
        k = self.keys
        with self._redis():
            reply: Any = self.r.xautoclaim(k.stream, k.group, self.name, self.s.claim_idle_ms, "0-0", count=100)
            claimed = [e for e in reply[1] if e[1]]
            return self._take(claimed) if claimed else []

    def unwanted(self, job_ids: list[str]) -> set[str]:
        with self.lock:
            return self.unwanted_ids.intersection(job_ids)

    def started(self, job: Job) -> None:
        with self._redis():
            self.scripts["START"](keys=[self.keys.job(job.id)], args=[self.name])

    def progress(self, job: Job, done: int) -> None:
        with self._redis():
            self.scripts["PROGRESS"](keys=[self.keys.job(job.id)], args=[done])

    def finish(self, job: Job, answer: Answer) -> None:
        """Answer once (a job already answered, cancelled or abandoned is not answered again), acknowledge,
        wake the waiting API. An answer too large for Redis fails the job and goes to the dead letters."""
        outputs, attention = answer.outputs_json(), answer.attention or ""
        size = sum(len(o.encode()) for o in outputs) + len(attention.encode())
        if size > self.max_result_bytes:
            reason = (
                f"the answer is {size} bytes, more than the queue takes ({self.max_result_bytes}; "
                "TRANSFORMER_MAX_RESULT_BYTES): ask for less"
            )
            with self._redis():
                self._dead_letter(job, reason, too_large=True)
            return
        k = self.keys
        status = JobStatus.failed if answer.error else JobStatus.done
        with self.lock:
            entry_id = self.entries.pop(job.id, b"")
            self.unwanted_ids.discard(job.id)
        with self._redis():
            self._send_counts()  # before the answer: a client that has it finds the counters current
            self.scripts["FINISH"](
                keys=[k.job(job.id), k.outputs(job.id), k.stream, k.file(job.id), k.kept(job.owner)],
                args=[
                    status.value,
                    answer.error or "",
                    "1" if answer.too_large else "",
                    len(outputs),
                    ttl(self.s, job.background),
                    k.group,
                    entry_id,
                    "" if job.background else k.answered,
                    job.id,
                    attention,
                    *outputs,
                ],
            )

    def drop(self, job: Job) -> None:
        with self.lock:
            entry_id = self.entries.pop(job.id, None)
            self.unwanted_ids.discard(job.id)
        if entry_id is not None:
            with self._redis():
                self._ack(entry_id)

    def busy(self, jobs: int, texts: int) -> None:
        self.load = (jobs, texts)

    def record_step(self, sentences: int, finished: int, seconds: float) -> None:
        self.counts.add(step_counts(sentences, finished, seconds))
        if self.counts.due():
            with self._redis():
                self._send_counts()

    def record_admission(self, texts: int, seconds: float) -> None:
        self.counts.add(admission_counts(texts, seconds))

    def _send_counts(self) -> None:
        """Add the counters not yet sent to Redis's (one round trip; none when there are none)."""
        counts = self.counts.take()
        if counts:
            p = self.r.pipeline(transaction=False)
            for name, v in counts.items():
                p.hincrbyfloat(self.keys.stats, name, v)
            p.execute()

    # -- the heartbeat thread --------------------------------------------------------------------

    def _beat_forever(self) -> None:
        while not self.stopping.wait(self.beat_every_s):
            try:
                self.beat()
            except (*DOWN, ResponseError) as e:  # the main loop notices an outage and waits it out
                log.debug("heartbeat failed: %s", e)

    def beat(self) -> None:
        """Say this worker lives, touch its jobs in flight (resetting their idle time, so that nobody
        reclaims them) and note which of them were cancelled or abandoned."""
        k = self.keys
        with self.lock:
            in_flight = dict(self.entries)
        jobs, texts = self.load
        p = self.r.pipeline(transaction=False)
        p.set(
            k.worker(self.name),
            json.dumps({"jobs": jobs, "texts": texts}),
            ex=max(10, 3 * self.s.claim_idle_ms // 1000),
        )
        if in_flight:
            p.xclaim(k.stream, k.group, self.name, 0, list(in_flight.values()), justid=True)
        for job_id in in_flight:
            p.hget(k.job(job_id), "status")
        replies = p.execute()
        statuses = replies[2:] if in_flight else []
        gone = {j for j, status in zip(in_flight, statuses, strict=True) if text(status) not in LIVE}
        with self.lock:
            self.unwanted_ids = gone

    def close(self) -> None:
        self.stopping.set()
        if self.heart.is_alive():
            self.heart.join(timeout=5)
        with self._redis():
            self._send_counts()
            self.r.delete(self.keys.worker(self.name))
        self.r.close()
