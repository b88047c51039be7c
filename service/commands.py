"""The `transformer serve` and `transformer worker` subcommands."""

from __future__ import annotations

import argparse
import contextlib
import logging
import signal
import threading
from typing import Any

from service.settings import ServiceSettings


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("serve", help="run the HTTP API (and, without REDIS_URL, the embedded worker)",
                       description="Settings come from the environment (TRANSFORMER_*, REDIS_URL); "
                                   "these options override them.")
    p.add_argument("--models-dir", default=None, help="directory of checkpoints (TRANSFORMER_MODELS_DIR)")
    p.add_argument("--host", default=None, help="TRANSFORMER_HOST (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=None, help="TRANSFORMER_PORT (default 8000)")
    p.add_argument("--redis-url", default=None, help="REDIS_URL: queue on Redis for separate workers")
    p.set_defaults(run=run_serve)

    p = sub.add_parser("worker", help="decode tasks from the Redis queue (needs REDIS_URL)",
                       description="Settings come from the environment (TRANSFORMER_*, REDIS_URL).")
    p.add_argument("--models-dir", default=None, help="directory of checkpoints (TRANSFORMER_MODELS_DIR)")
    p.add_argument("--redis-url", default=None, help="REDIS_URL")
    p.add_argument("--name", default=None, help="consumer name (TRANSFORMER_WORKER_NAME); unique per worker")
    p.set_defaults(run=run_worker)


def settings_from(args: argparse.Namespace, **names: str) -> ServiceSettings:
    """Environment settings with the command line's overrides (option name -> settings field)."""
    overrides: dict[str, Any] = {f: getattr(args, a) for a, f in names.items() if getattr(args, a) is not None}
    base = ServiceSettings()
    return ServiceSettings.model_validate({**base.model_dump(), **overrides}) if overrides else base


def run_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from service.app import create_app
    s = settings_from(args, models_dir="models_dir", host="host", port="port", redis_url="redis_url")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    uvicorn.run(create_app(s), host=s.host, port=s.port, log_level="info")
    return 0


def run_worker(args: argparse.Namespace) -> int:
    from service.redis_queue import RedisWorkSource
    from service.registry import Registry
    from service.worker import Worker
    s = settings_from(args, models_dir="models_dir", redis_url="redis_url", name="worker_name")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    log = logging.getLogger("service")
    if not s.redis_url:
        log.error("a worker needs REDIS_URL (or --redis-url); without it `transformer serve` decodes in-process")
        return 2
    registry = Registry.scan(s.models_dir)
    if not registry.models:
        log.error("no models in %s", s.models_dir)
        return 2
    translators = registry.load_translators(s.resolved_device, s.dtype, s.threads)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    source = RedisWorkSource(s)
    log.info("worker %s serving %s from %s", s.worker_name, ", ".join(registry.ids), s.redis_url)
    Worker(source, translators, s, maintain_every_s=min(5.0, s.claim_idle_ms / 3000)).run(stop)
    with contextlib.suppress(Exception):  # Redis may be gone at shutdown; nothing to clean then
        source.close()
    log.info("worker %s stopped", s.worker_name)
    return 0
