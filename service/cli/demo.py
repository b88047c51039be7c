"""`transformer demo`: build the offline corpus, train the small en->de model (or reuse it), serve it with
the browser demo at http://127.0.0.1:8000."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import training

DEMO_CONFIG = Path(training.__file__).parent / "configs" / "demo-en-de.yaml"
MODEL_ID = "demo-en-de"
IMPORTED = Path("runs") / "demo-models"  # `demo --model`: each model imported once, in a models directory of its own


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "demo",
        help="train (or reuse) the small en->de demo model and serve the browser demo",
        description="Builds the English->German corpus from the machine's gettext catalogs, "
        "trains the small demo model (about 15 minutes on 2 CPU cores; reused once "
        "trained), then serves it with the browser demo.",
    )
    p.add_argument("--config", type=Path, default=DEMO_CONFIG, help="training config (default: the en->de demo)")
    p.add_argument("--retrain", action="store_true", help="train again even if a trained model exists")
    p.add_argument(
        "--model",
        default=None,
        help="serve this model instead of training the small one: a hub id (fetched on a machine that is online), "
        "a Hugging Face directory or one of our checkpoints, imported once into runs/demo-models and reused",
    )
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.set_defaults(run=run_demo)


def trained(run_dir: Path) -> bool:
    """A finished run: its best checkpoint was scored on the test split at the end."""
    return (run_dir / "best" / "config.json").is_file() and (run_dir / "test_scores.json").is_file()


def models_dir_for(run_dir: Path) -> Path:
    """A models directory holding only the run's best checkpoint, under a readable id."""
    models = run_dir / "serve"
    models.mkdir(parents=True, exist_ok=True)
    link = models / MODEL_ID
    if not link.is_symlink():
        link.symlink_to(Path("..") / "best", target_is_directory=True)
    return models


def run_demo(args: argparse.Namespace) -> int:
    from training.config import load_config
    from training.extras import require_train_extra
    from training.trainer import train

    if args.model is not None:
        return serve_demo(imported_models(args.model), args)
    cfg = load_config(str(args.config), [])
    run_dir = Path(cfg.run_dir)
    if args.retrain or not trained(run_dir):
        require_train_extra("demo")
        print(f"training the demo model into {run_dir} (progress below; resumes if interrupted)", file=sys.stderr)
        train(cfg, resume=not args.retrain)
    else:
        print(f"reusing the trained demo model in {run_dir / 'best'} (--retrain to train again)", file=sys.stderr)
    return serve_demo(models_dir_for(run_dir), args)


def imported_models(model: str) -> Path:
    """A models directory holding only the model asked for, imported the first time (model.families)."""
    from model.families import import_once

    name = Path(model.rstrip("/")).name
    models = IMPORTED / name
    reused = (models / name / "config.json").is_file()
    print(f"{'reusing' if reused else 'importing'} {model} in {models / name}", file=sys.stderr)
    import_once(f"{model}={name}", models)
    return models


def serve_demo(models_dir: Path, args: argparse.Namespace) -> int:
    import uvicorn

    from service.api.app import create_app
    from service.http import uvicorn_options
    from service.logs import configure_logging
    from service.settings import ServiceSettings

    settings = ServiceSettings(models_dir=models_dir, host=args.host, port=args.port, redis_url=None)
    configure_logging(settings.log_format, access=False)  # the page is the interface: no line per request
    print(f"open http://{args.host}:{args.port}/ in a browser (Ctrl-C stops)", file=sys.stderr)
    uvicorn.run(create_app(settings), host=args.host, port=args.port, log_config=None, **uvicorn_options(settings))
    return 0
