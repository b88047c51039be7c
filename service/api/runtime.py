"""The running service behind the API: its settings, the model registry, the queue (and, without Redis, the
embedded worker), access control and request metrics. Built by create_app; models load in a background
thread so that /healthz answers at once."""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import threading

from service.allocator import AllocatorMissing, preloaded
from service.api.access import Access
from service.api.metrics import RequestMetrics
from service.detect import Detector
from service.queue.contract import ApiQueue
from service.queue.memory import MemoryQueue
from service.queue.processes import Bridge
from service.queue.worker import Worker
from service.registry import Registry, freeze_loaded, wait_for_models
from service.settings import ServiceSettings

log = logging.getLogger("service")


class WorkersFailed(Exception):
    """A worker process could not load the models (it logged why)."""


class Service:
    """What every route reads (service.api.deps): the settings, the registry, the queue, access and metrics,
    and whether the models are ready (load_error says why not)."""

    def __init__(self, settings: ServiceSettings) -> None:
        self.settings = settings
        self.registry = Registry({}, {})
        self.queue: ApiQueue
        self.memory: MemoryQueue | None = None
        if settings.redis_url:
            from service.queue.redis_api import RedisApiQueue

            self.queue = RedisApiQueue(settings)
        else:
            self.memory = MemoryQueue(settings)
            self.queue = self.memory
        self.access = Access(settings, self.queue)
        self.metrics = RequestMetrics()
        self.ready = threading.Event()
        self.load_error: str | None = None
        self.detector = Detector(())  # the models' languages', once they are read
        self.stop = threading.Event()
        self.threads: list[threading.Thread] = []
        self.bridges: list[Bridge] = []  # the embedded queue's worker processes

    def start(self) -> None:
        t = threading.Thread(target=self._load, name="load-models", daemon=True)
        t.start()
        self.threads.append(t)

    def _waiting(self, registry: Registry, reason: str) -> None:
        self.registry, self.load_error = registry, reason

    def _load(self) -> None:
        """Read the registry (waiting for a first model when there is none); in embedded mode also load the
        start the workers (ServiceSettings.worker_plan)."""
        s = self.settings
        try:
            registry = wait_for_models(s, self.stop, self._waiting)
            if registry is None:
                return  # stopped while waiting
            if self.memory is not None:
                self._start_workers(self.memory, registry)
            self.detector = Detector.of(registry)
            self.registry, self.load_error = registry, None
            freeze_loaded()
            self.ready.set()
        except WorkersFailed as e:
            self.load_error = f"{e}; see the server's log"
        except Exception as e:  # reported by /readyz (without paths); the process stays up for inspection
            log.exception("loading models failed")
            self.load_error = f"loading the models failed ({type(e).__name__}); see the server's log"

    def _start_workers(self, memory: MemoryQueue, registry: Registry) -> None:
        """The embedded queue's workers: in child processes (service.queue.processes), each loading the models,
        once all are ready; or threads of this process sharing one copy of the weights."""
        s = self.settings
        plan = s.worker_plan(beside_api=True)
        memory.readers = plan.workers
        if plan.processes:
            try:
                env = preloaded(os.environ, plan.allocator)
            except AllocatorMissing as e:
                raise WorkersFailed(str(e)) from None
            self.bridges = [Bridge(memory, s, f"worker-process-{i}", self.stop, env) for i in range(plan.workers)]
            for bridge in self.bridges:
                bridge.start()
            for bridge in self.bridges:
                while not bridge.settled.wait(0.5):
                    if self.stop.is_set():
                        return
                if bridge.error is not None:
                    raise WorkersFailed(bridge.error)
            return
        translators = registry.load_translators(s.resolved_device, s.dtype, plan.threads)
        for i in range(plan.workers):  # the weights are shared; each worker has its own searches
            worker = Worker(memory, translators, s)
            t = threading.Thread(target=worker.run, args=(self.stop,), name=f"worker-{i}", daemon=True)
            t.start()
            self.threads.append(t)

    async def close(self) -> None:
        self.stop.set()
        for bridge in self.bridges:
            await asyncio.to_thread(bridge.close)
        for t in self.threads:
            t.join(timeout=5)
        await self.queue.close()
        gc.unfreeze()  # what freeze_loaded kept out of reach can be collected again once the app is gone
