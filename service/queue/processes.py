"""The embedded queue's workers in child processes (ServiceSettings.worker_processes). Each child runs the worker
loop (service.queue.worker) with its own GIL and its own copy of the weights, and reaches the API's MemoryQueue
through its stdin and stdout, one JSON object a line; a thread of the API's process, its Bridge, answers it.

A child that dies loses nothing: the jobs it held go back to the front of the queue (one delivered
max_deliveries times fails instead, as with Redis), and a new child takes its place.

The lines, child to API: {"op": "ready"} once its models are loaded (or "failed", with "error"), then one line per
WorkerQueue call: "read" (count, block_s) and "unwanted" (ids) are answered with one line ({"jobs": [Job JSON],
"more": whether jobs are still queued}, {"ids": [...]}); "started", "progress" (done), "finish" (answer), "drop"
(each naming its "job" by id) and "counts" are not. A child adds up its step and admission counters and sends them
as "counts" at most every COUNTS_EVERY_S, before it waits for work, and with each "finish" (its "counts"), not a
line a step (service.queue.counters); what it holds (WorkerQueue.busy) goes with them as "busy" ([jobs, texts]),
when it changed, as a Redis worker sends it with its heartbeat. "started" is sent for background jobs only: a
request's job is only waited for, and nobody reads whether it is queued or running. Lines are ASCII (json.dumps
escapes the rest, lone surrogates included).

A busy child does not ask for new jobs on every step of its search (a round trip, ~100 us, on steps of 1-2 ms):
the API writes a byte on a second pipe, the wake pipe, whenever jobs are queued, and the child asks only when
that pipe holds one or its last read said more were queued. An idle child always asks, waiting in the API.

    python -m service.queue.processes WAKE_FD    # a child: the API starts it and writes its settings first
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import signal
import subprocess
import sys
import threading
from typing import IO, Any

from service.queue.contract import Answer, Job
from service.queue.counters import PendingCounts, admission_counts, step_counts
from service.queue.memory import MemoryQueue
from service.settings import ServiceSettings

log = logging.getLogger("service")
RESTART_AFTER_S = (0.5, 30.0)  # a child that died is started again after this long, doubling while it fails to load


def line(op: str, **fields: Any) -> bytes:
    return json.dumps({"op": op, **fields}).encode("ascii") + b"\n"


class ParentGone(BaseException):
    """The API's process closed the pipe: the child has nobody to work for. A BaseException, so that the worker
    loop's catch-all (which answers every job in flight with an error) lets it through."""


# -- the child's side ---------------------------------------------------------------------------------


class PipeQueue:
    """The WorkerQueue of a child process: each call is a line to the API's Bridge."""

    def __init__(self, source: IO[bytes], sink: IO[bytes], wake: int | None = None) -> None:
        self.source, self.sink = source, sink
        self.wake = wake  # the wake pipe's read end, non-blocking; None: ask on every read
        self.more = True  # whether the last read left jobs queued
        self.counts = PendingCounts()  # step and admission counters not yet sent
        self.load = self.load_sent = (0, 0)  # what the worker holds (busy), and what the API was last told

    def send(self, op: str, **fields: Any) -> None:
        try:
            self.sink.write(line(op, **fields))
            self.sink.flush()
        except (BrokenPipeError, ValueError) as e:  # ValueError: the pipe was closed
            raise ParentGone from e

    def ask(self, op: str, **fields: Any) -> dict[str, Any]:
        self.send(op, **fields)
        reply = self.source.readline()
        if not reply:
            raise ParentGone
        answer: dict[str, Any] = json.loads(reply)
        return answer

    def read(self, count: int, block_s: float) -> list[Job]:
        """New jobs; a read that would not wait asks only when jobs were queued since the last one."""
        woken = self.woken()  # emptied before asking: a job queued after this leaves a byte for the next read
        if block_s <= 0 and not woken and not self.more:
            return []
        if block_s > 0 and (self.counts.pending() or self.load != self.load_sent):  # about to wait: counts sent first
            self.send_counts()
        reply = self.ask("read", count=count, block_s=block_s)
        self.more = bool(reply["more"])
        return [Job.from_json(j) for j in reply["jobs"]]

    def woken(self) -> bool:
        """Whether the wake pipe held a byte (or was closed: asking then finds the API's process gone); empties it."""
        if self.wake is None:
            return True
        try:
            os.read(self.wake, 4096)
        except BlockingIOError:
            return False
        return True

    def maintain(self) -> list[Job]:
        return []  # the API's Bridge puts a dead child's jobs back in the queue

    def unwanted(self, job_ids: list[str]) -> set[str]:
        return set(self.ask("unwanted", ids=job_ids)["ids"]) if job_ids else set()

    def started(self, job: Job) -> None:
        if job.background:  # GET /jobs shows it running
            self.send("started", job=job.id)

    def progress(self, job: Job, done: int) -> None:
        self.send("progress", job=job.id, done=done)

    def finish(self, job: Job, answer: Answer) -> None:
        """With the counts not yet sent: a client that has its answer finds /metrics counting its steps."""
        self.send("finish", job=job.id, answer=answer.to_dict(), counts=self.counts.take(), **self.load_changed())

    def drop(self, job: Job) -> None:
        self.send("drop", job=job.id)

    def busy(self, jobs: int, texts: int) -> None:
        self.load = (jobs, texts)  # sent with the counts

    def record_step(self, sentences: int, finished: int, seconds: float) -> None:
        self.counts.add(step_counts(sentences, finished, seconds))
        if self.counts.due():
            self.send_counts()

    def record_admission(self, texts: int, seconds: float) -> None:
        self.counts.add(admission_counts(texts, seconds))

    def send_counts(self) -> None:
        self.send("counts", counts=self.counts.take(), **self.load_changed())

    def load_changed(self) -> dict[str, list[int]]:
        """{"busy": [jobs, texts]} when the load changed since the API was last told, else {}."""
        if self.load == self.load_sent:
            return {}
        self.load_sent = self.load
        return {"busy": list(self.load)}


def child_main() -> int:
    """A child process: settings from the first line of stdin, the models loaded, then the worker loop until
    the API's process closes the pipe."""
    from service.logs import configure_logging
    from service.queue.worker import Worker
    from service.registry import Registry, freeze_loaded

    sink = os.fdopen(os.dup(1), "wb")  # the protocol's own stdout; anything else printed goes to stderr
    os.dup2(2, 1)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group: the API stops its children
    wake = int(sys.argv[1]) if len(sys.argv) > 1 else None
    if wake is not None:
        os.set_blocking(wake, False)
    queue = PipeQueue(sys.stdin.buffer, sink, wake)
    settings = ServiceSettings.model_validate_json(sys.stdin.buffer.readline())
    configure_logging(settings.log_format, access=False)
    try:
        plan = settings.worker_plan(beside_api=True)
        registry = Registry.scan(settings.models_dir)
        translators = registry.load_translators(settings.resolved_device, settings.dtype, plan.threads)
        freeze_loaded()
    except Exception as e:
        log.exception("a worker process could not load the models")
        queue.send("failed", error=f"a worker process could not load the models ({type(e).__name__})")
        return 1
    try:
        queue.send("ready")
        Worker(queue, translators, settings).run(threading.Event())
    except ParentGone:
        pass
    return 0


# -- the API's side -----------------------------------------------------------------------------------


def poke(wake: int) -> None:
    """Write a byte on a child's wake pipe; a full pipe has bytes enough, and a dead child needs none."""
    with contextlib.suppress(OSError):
        os.write(wake, b"!")


def child_settings(settings: ServiceSettings) -> str:
    """The settings a child needs, as JSON: all but the secrets (model_dump_json would write them as stars)."""
    return settings.model_dump_json(exclude={"api_keys", "redis_url"})


class Bridge:
    """One child process (started again whenever it dies) and the thread of the API's process that answers its
    calls on the MemoryQueue. `settled` is set once the first child is ready or has failed (`error`)."""

    def __init__(
        self,
        memory: MemoryQueue,
        settings: ServiceSettings,
        name: str,
        stop: threading.Event,
        env: dict[str, str] | None = None,
    ) -> None:
        self.memory, self.settings, self.name, self.stop = memory, settings, name, stop
        self.env = env  # the child's environment (service.allocator.preloaded); None: this process's
        self.held: dict[str, Job] = {}  # the jobs the child has read and not yet finished or dropped
        self.settled = threading.Event()
        self.error: str | None = None
        self.proc: subprocess.Popen[bytes] | None = None
        self.thread = threading.Thread(target=self.run, name=name, daemon=True)

    def start(self) -> None:
        self.thread.start()

    def run(self) -> None:
        delay = RESTART_AFTER_S[0]
        while not self.stop.is_set():
            wake_r, wake_w = os.pipe()
            os.set_blocking(wake_w, False)
            proc = self.proc = subprocess.Popen(
                [sys.executable, "-m", "service.queue.processes", str(wake_r)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                pass_fds=(wake_r,),
                env=self.env,
            )
            os.close(wake_r)
            assert proc.stdin is not None and proc.stdout is not None
            self.memory.watch(self.name, functools.partial(poke, wake_w))
            try:
                was_ready = self.serve(proc, proc.stdin, proc.stdout)
            finally:
                self.memory.watch(self.name, None)  # under the queue's lock: no poke is under way after it
                os.close(wake_w)
            code = proc.wait()
            self.recover(code)
            if self.stop.is_set():
                return
            if not self.settled.is_set():  # the first child could not load: the service reports it
                self.error = self.error or f"a worker process exited with code {code} while loading the models"
                self.settled.set()
                return
            delay = RESTART_AFTER_S[0] if was_ready else min(2 * delay, RESTART_AFTER_S[1])
            self.stop.wait(delay)

    def serve(self, proc: subprocess.Popen[bytes], sink: IO[bytes], source: IO[bytes]) -> bool:
        """Answer the child's calls until it exits; whether it got ready."""
        ready = False
        try:
            sink.write(child_settings(self.settings).encode("utf-8") + b"\n")
            sink.flush()
            for raw in source:
                message: dict[str, Any] = json.loads(raw)
                op = message["op"]
                if op == "ready":
                    ready = True
                    self.settled.set()
                elif op == "failed":
                    self.error = str(message["error"])
                else:
                    reply = self.call(op, message)
                    if reply is not None:
                        sink.write(reply)
                        sink.flush()
        except (BrokenPipeError, ValueError, OSError):  # the child is gone, or wrote something unreadable
            if not self.stop.is_set():  # stopping, the child is ended while it waits for a reply
                log.exception("worker process %s: its pipe failed", self.name)
        finally:
            if proc.poll() is None:
                proc.kill()
        return ready

    def call(self, op: str, m: dict[str, Any]) -> bytes | None:
        """One WorkerQueue call of the child on the MemoryQueue; the reply line of those that have one."""
        q = self.memory
        if op == "read":
            jobs = q.read(int(m["count"]), float(m["block_s"]))
            self.held.update((j.id, j) for j in jobs)
            reply = {"jobs": [j.to_json() for j in jobs], "more": q.has_queued()}
            return json.dumps(reply).encode("ascii") + b"\n"
        if op == "unwanted":
            return json.dumps({"ids": sorted(q.unwanted(list(m["ids"])))}).encode("ascii") + b"\n"
        if op in ("counts", "finish"):
            q.add_counts({str(k): float(v) for k, v in m["counts"].items()})
            if "busy" in m:
                q.busy(int(m["busy"][0]), int(m["busy"][1]))
        if op != "counts" and (job := self.held.get(m["job"])) is not None:
            if op == "started":
                q.started(job)
            elif op == "progress":
                q.progress(job, int(m["done"]))
            elif op == "finish":
                del self.held[job.id]
                q.finish(job, Answer.from_dict(m["answer"]))
            elif op == "drop":
                del self.held[job.id]
                q.drop(job)
        return None

    def recover(self, code: int) -> None:
        """The child has exited: the jobs it held go back to the queue."""
        if not self.stop.is_set():
            held = len(self.held)
            log.warning("worker process %s exited (code %s); its %d jobs go back to the queue", self.name, code, held)
        self.memory.requeue(list(self.held.values()))
        self.held.clear()
        self.memory.busy(0, 0)

    def close(self) -> None:
        """Stop the child (stop is set already): closing its stdin ends it, or it is killed."""
        proc = self.proc
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
        self.thread.join(timeout=5)


if __name__ == "__main__":
    sys.exit(child_main())
