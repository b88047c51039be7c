"""The `transformer serve`, `transformer worker` and `transformer attention` subcommands."""

from __future__ import annotations

import argparse
import contextlib
import logging
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from service.logs import configure_logging
from service.settings import ServiceSettings, settings_error


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
        help="decode tasks from the Redis queue (needs REDIS_URL)",
        description="Settings come from the environment (TRANSFORMER_*, REDIS_URL).",
    )
    p.add_argument("--models-dir", default=None, help="directory of checkpoints (TRANSFORMER_MODELS_DIR)")
    p.add_argument("--redis-url", default=None, help="REDIS_URL")
    p.add_argument("--name", default=None, help="consumer name (TRANSFORMER_WORKER_NAME); unique per worker")
    p.set_defaults(run=run_worker)

    p = sub.add_parser(
        "attention",
        help="translate one text and draw its attention as a PNG heatmap",
        description="Default: cross-attention of the last decoder layer, mean over heads. "
        "Layers and heads count from 0.",
    )
    p.add_argument("text", help="the text to translate (or summarize)")
    p.add_argument("--model", required=True, help="checkpoint directory")
    p.add_argument("--png", required=True, help="heatmap file to write")
    p.add_argument("--json", default=None, help="also write every attention map, as POST /attention answers")
    p.add_argument(
        "--kind",
        choices=["cross", "encoder", "decoder"],
        default="cross",
        help="cross: output over source tokens; encoder or decoder: self-attention",
    )
    p.add_argument("--layer", type=int, default=-1, help="layer index; negative counts from the last (default -1)")
    p.add_argument("--head", type=head_arg, default=None, metavar="H|mean", help="head index, or mean (default)")
    p.add_argument("--beam-size", type=int, default=4)
    p.add_argument("--max-length", type=int, default=None, help="most output tokens; default: input length + 50")
    p.add_argument("--truncate", action="store_true", help="cut an input longer than the model's limit")
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    p.set_defaults(run=run_attention)


def head_arg(value: str) -> int | None:
    """--head: an index, or mean (None) for the mean over heads."""
    if value == "mean":
        return None
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a head index or 'mean', got {value!r}") from None


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

    from service.app import create_app

    s = settings_from(args, models_dir="models_dir", host="host", port="port", redis_url="redis_url")
    configure_logging(s.log_format)
    uvicorn.run(create_app(s), host=s.host, port=s.port, log_config=None)
    return 0


def run_worker(args: argparse.Namespace) -> int:
    from service.redis_queue import RedisWorkSource
    from service.state import freeze_loaded, wait_for_models
    from service.worker import Worker

    s = settings_from(args, models_dir="models_dir", redis_url="redis_url", name="worker_name")
    configure_logging(s.log_format)
    log = logging.getLogger("service")
    if not s.redis_url:
        log.error("a worker needs REDIS_URL (or --redis-url); without it `transformer serve` decodes in-process")
        return 2
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    registry = wait_for_models(s, stop)  # an empty volume is waited on, not a restart loop
    if registry is None:
        return 0
    translators = registry.load_translators(s.resolved_device, s.dtype, s.threads)
    freeze_loaded()
    beat = min(5.0, s.claim_idle_ms / 3000)  # three heartbeats within the time after which tasks are reclaimed
    source = RedisWorkSource(s, beat_every_s=beat)
    source.start()
    log.info("worker %s serving %s", s.worker_name, ", ".join(registry.ids))  # never the URL: it may hold a password
    Worker(source, translators, s, maintain_every_s=beat).run(stop)
    with contextlib.suppress(Exception):  # Redis may be gone at shutdown; nothing to clean then
        source.close()
    log.info("worker %s stopped", s.worker_name)
    return 0


def run_attention(args: argparse.Namespace) -> int:
    from model.config import DecodingConfig
    from model.translator import Translator
    from service.batcher import attention_body, attention_json
    from service.heatmap import select, write_png
    from service.tasks import AttentionSelection
    from training.extras import require_train_extra

    require_train_extra("attention", ("matplotlib",))  # the PNG
    translator = Translator.load(args.model, device=args.device)
    cfg = DecodingConfig(beam_size=args.beam_size).with_max_length(args.max_length)  # as POST /attention
    best = translator.translate([args.text], cfg, return_attention=True, truncate=args.truncate)[0]
    assert best.attention is not None
    heatmap = select(best.attention, args.kind, args.layer, args.head)
    print(best.text, flush=True)
    print(f"wrote {write_png(heatmap, args.png)} ({heatmap.title})", file=sys.stderr)
    if args.json:
        body = attention_body(
            Path(args.model).resolve().name, 0, best.hypotheses, attention_json(best.attention, AttentionSelection())
        )
        out = Path(args.json)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(body)
        print(f"wrote {out}", file=sys.stderr)
    return 0
