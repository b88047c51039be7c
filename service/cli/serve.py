"""The `transformer serve` and `transformer worker` subcommands."""

from __future__ import annotations

import argparse
import contextlib
import logging
import signal
import threading
from typing import Any

from pydantic import ValidationError

from service.logs import configure_logging
from service.settings import ServiceSettings, listed, settings_error


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "serve",
        help="run the HTTP API (and, without REDIS_URL, the embedded worker)",
        description="Settings come from the environment (TRANSFORMER_*, REDIS_URL); these options override them.",
    )
    p.add_argument("--models-dir", default=None, help="directory of checkpoints (TRANSFORMER_MODELS_DIR)")
    p.add_argument("--host", default=None, help="TRANSFORMER_HOST (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=None, help="TRANSFORMER_PORT (default 8000)")
    p.add_argument("--redis-url", default=None, help="REDIS_URL: queue on Redis for separate workers")
    p.set_defaults(run=run_serve)

    p = sub.add_parser(
        "worker",
        help="decode jobs from the Redis queue (needs REDIS_URL)",
        description="Settings come from the environment (TRANSFORMER_*, REDIS_URL).",
    )
    p.add_argument("--models-dir", default=None, help="directory of checkpoints (TRANSFORMER_MODELS_DIR)")
    p.add_argument("--redis-url", default=None, help="REDIS_URL")
    p.add_argument("--name", default=None, help="consumer name (TRANSFORMER_WORKER_NAME); unique per worker")
    p.set_defaults(run=run_worker)

    p = sub.add_parser(
        "import-models",
        help="import the models TRANSFORMER_IMPORT_MODELS lists into the models directory, those not there yet",
        description="Each of the comma-separated SRC or SRC=NAME (SRC: a hub id, fetched on a machine that is "
        "online, or a directory) is imported once into TRANSFORMER_MODELS_DIR/NAME and reused after; "
        "the compose deploy runs this before the API and the workers start.",
    )
    p.add_argument("models", nargs="*", help="SRC or SRC=NAME, instead of TRANSFORMER_IMPORT_MODELS")
    p.add_argument("--models-dir", default=None, help="directory of checkpoints (TRANSFORMER_MODELS_DIR)")
    p.set_defaults(run=run_import_models)


def settings_from(args: argparse.Namespace, **names: str) -> ServiceSettings:
    """Environment settings with the command line's overrides (option name -> settings field)."""
    overrides: dict[str, Any] = {f: getattr(args, a) for a, f in names.items() if getattr(args, a) is not None}
    try:
        base = ServiceSettings()
        return ServiceSettings.model_validate({**base.model_dump(), **overrides}) if overrides else base
    except ValidationError as e:
        raise settings_error(e) from None


def run_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from service.api.app import create_app
    from service.http import uvicorn_options

    s = settings_from(args, models_dir="models_dir", host="host", port="port", redis_url="redis_url")
    configure_logging(s.log_format)
    uvicorn.run(create_app(s), host=s.host, port=s.port, log_config=None, **uvicorn_options(s))
    return 0


def run_worker(args: argparse.Namespace) -> int:
    from service.allocator import AllocatorMissing, restart_with
    from service.queue.redis_worker import RedisWorkerQueue
    from service.queue.worker import Worker
    from service.registry import freeze_loaded, wait_for_models

    s = settings_from(args, models_dir="models_dir", redis_url="redis_url", name="worker_name")
    configure_logging(s.log_format)
    log = logging.getLogger("service")
    if not s.redis_url:
        log.error("a worker needs REDIS_URL (or --redis-url); without it `transformer serve` decodes in-process")
        return 2
    plan = s.worker_plan(beside_api=False)
    try:
        restart_with(plan.allocator)  # returns once this process runs on it (or on the system's allocator)
    except AllocatorMissing as e:
        log.error("%s", e)
        return 2
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    registry = wait_for_models(s, stop)  # an empty volume is waited on, not a restart loop
    if registry is None:
        return 0
    translators = registry.load_translators(s.resolved_device, s.dtype, plan.threads)
    freeze_loaded()
    beat = min(5.0, s.claim_idle_ms / 3000)  # three heartbeats within the time after which tasks are reclaimed
    # Each worker is a consumer of its own (NAME, or NAME-i for several), with its own searches; the weights are shared.
    names = [s.worker_name] if plan.workers == 1 else [f"{s.worker_name}-{i}" for i in range(plan.workers)]
    queues = [RedisWorkerQueue(s.model_copy(update={"worker_name": name}), beat_every_s=beat) for name in names]
    for queue in queues:
        queue.start()
    log.info("worker %s serving %s", ", ".join(names), ", ".join(registry.ids))  # never the URL: it may hold a password
    threads = [
        threading.Thread(target=Worker(q, translators, s, maintain_every_s=beat).run, args=(stop,), name=name)
        for q, name in zip(queues, names, strict=True)
    ]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        stop.wait(0.5)  # the main thread takes the signals
        if stop.is_set():
            for t in threads:
                t.join()
    for queue in queues:
        with contextlib.suppress(Exception):  # Redis may be gone at shutdown; nothing to clean then
            queue.close()
    log.info("worker %s stopped", ", ".join(names))
    return 0


def run_import_models(args: argparse.Namespace) -> int:
    from model.families import import_models

    s = settings_from(args, models_dir="models_dir")
    configure_logging(s.log_format)
    log = logging.getLogger("service")
    specs = args.models or listed(s.import_models)
    log.info("importing %s into %s, those not there yet", ", ".join(specs) or "no models", s.models_dir)
    for spec, path in zip(specs, import_models(specs, s.models_dir), strict=True):
        log.info("model %s: %s", spec, path)
    return 0
