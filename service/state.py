"""The running service's state (registry, queue, embedded worker) and the request dependencies."""

from __future__ import annotations

import gc
import logging
import threading
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from service.access import Access
from service.errors import Unavailable
from service.memory_queue import MemoryQueue
from service.metrics import RequestMetrics
from service.queue import TaskQueue
from service.registry import Registry
from service.settings import ServiceSettings
from service.worker import Worker

log = logging.getLogger("service")


MODELS_POLL_S = 5.0  # how often an empty models directory is looked at again


def no_models_reason(settings: ServiceSettings, registry: Registry) -> str:
    where = settings.models_dir
    if not where.is_dir():
        return f"the models directory {where} does not exist (TRANSFORMER_MODELS_DIR, --models-dir)"
    broken = f"; {len(registry.errors)} could not be read (GET /models says why)" if registry.errors else ""
    return f"no models in {where}: put a checkpoint directory there (see the README's Models){broken}"


def wait_for_models(
    settings: ServiceSettings, stop: threading.Event, state: ServiceState | None = None
) -> Registry | None:
    """The registry once the models directory holds a model, looking again every MODELS_POLL_S, with a warning
    (and the reason on /readyz, given state) while it holds none; None when stop is set first."""
    warned = False
    while True:
        registry = Registry.scan(settings.models_dir)
        if registry.models:
            if warned:
                log.info("models found in %s: %s", settings.models_dir, ", ".join(registry.ids))
            return registry
        reason = no_models_reason(settings, registry)
        if state is not None:
            state.registry, state.load_error = registry, reason
        if not warned:
            log.warning("%s; waiting for one (looking every %.0f s)", reason, MODELS_POLL_S)
            warned = True
        if stop.wait(MODELS_POLL_S):
            return None


def freeze_loaded() -> None:
    """Put everything loaded so far (torch, the models, the app: some 300,000 objects) beyond the garbage
    collector's reach: each of its full collections would walk them all again while requests wait."""
    gc.collect()
    gc.freeze()


class ServiceState:
    """Built by create_app; models load in a background thread so that /healthz answers at once."""

    def __init__(self, settings: ServiceSettings) -> None:
        self.settings = settings
        self.registry = Registry({}, {})
        self.queue: TaskQueue
        self.memory: MemoryQueue | None = None
        if settings.redis_url:
            from service.redis_queue import RedisQueue

            self.queue = RedisQueue(settings)
        else:
            self.memory = MemoryQueue(settings)
            self.queue = self.memory
        self.access = Access(settings, self.queue)
        self.metrics = RequestMetrics()
        self.ready = threading.Event()
        self.load_error: str | None = None
        self.stop = threading.Event()
        self.threads: list[threading.Thread] = []

    def start(self) -> None:
        t = threading.Thread(target=self._load, name="load-models", daemon=True)
        t.start()
        self.threads.append(t)

    def _load(self) -> None:
        """Read the registry (waiting for a first model when there is none); in embedded mode also load the
        weights and start the worker thread."""
        s = self.settings
        try:
            registry = wait_for_models(s, self.stop, self)
            if registry is None:
                return  # stopped while waiting
            if self.memory is not None:
                translators = registry.load_translators(s.resolved_device, s.dtype, s.threads)
                worker = Worker(self.memory, translators, s)
                t = threading.Thread(target=worker.run, args=(self.stop,), name="worker", daemon=True)
                t.start()
                self.threads.append(t)
            self.registry, self.load_error = registry, None
            freeze_loaded()
            self.ready.set()
        except Exception as e:  # reported by /readyz (without paths); the process stays up for inspection
            log.exception("loading models failed")
            self.load_error = f"loading the models failed ({type(e).__name__}); see the server's log"

    async def close(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=5)
        await self.queue.close()
        gc.unfreeze()  # what freeze_loaded kept out of reach can be collected again once the app is gone


# Dependencies are coroutines: FastAPI runs a plain function in a worker thread, a costly hop per request.
async def get_state(request: Request) -> ServiceState:
    state: ServiceState = request.app.state.service
    return state


async def ready_state(request: Request) -> ServiceState:
    state: ServiceState = request.app.state.service
    if not state.ready.is_set():
        raise Unavailable(state.load_error or "the models are still loading", retry_after=2)
    return state


bearer = HTTPBearer(auto_error=False)  # for the OpenAPI document: service.guard checks keys before the body


async def owner(request: Request, _: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]) -> str | None:
    """The owner id of the request's API key (service.access.owner_of), None without keys."""
    value: str | None = request.state.owner
    return value


State = Annotated[ServiceState, Depends(get_state)]
ReadyState = Annotated[ServiceState, Depends(ready_state)]
Owner = Annotated[str | None, Depends(owner)]
