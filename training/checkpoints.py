"""Training checkpoints: a model checkpoint plus optimizer, schedule, RNG and data position, written
atomically; keep the last K, keep the best, average the last N (§6.1). No pickle anywhere."""

from __future__ import annotations

import json
import random
import shutil
import tempfile
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from model.checkpoint import WEIGHTS_FILE, CheckpointMeta, load_weights, read_meta, save_checkpoint
from model.errors import CheckpointError
from model.transformer import Transformer

STATE_FILE = "trainer_state.json"
OPTIMIZER_FILE = "optimizer.safetensors"
STEP_PREFIX = "step_"


@dataclass
class TrainerState:
    """Where training stands: enough, with the optimizer and RNG, to resume exactly."""

    step: int = 0  # optimizer steps taken
    epoch: int = 0
    batch_in_epoch: int = 0  # batches of this epoch already consumed (by this rank)
    tokens: int = 0  # target tokens trained on
    elapsed: float = 0.0  # seconds of training
    best_score: float | None = None
    best_step: int | None = None
    data_key: str = ""


def checkpoint_dir(run_dir: Path, step: int) -> Path:
    return run_dir / "checkpoints" / f"{STEP_PREFIX}{step:08d}"


def list_checkpoints(run_dir: Path) -> list[Path]:
    """Complete step checkpoints, oldest first."""
    folder = run_dir / "checkpoints"
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if p.name.startswith(STEP_PREFIX) and (p / STATE_FILE).is_file())


def _optimizer_tensors(optimizer: torch.optim.Optimizer) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    state = optimizer.state_dict()
    tensors: dict[str, torch.Tensor] = {}
    scalars: dict[str, Any] = {}
    for index, values in state["state"].items():
        for name, value in values.items():
            key = f"state.{index}.{name}"
            if isinstance(value, torch.Tensor):
                tensors[key] = value.detach().cpu().contiguous()
            else:
                scalars[key] = value
    return tensors, {"param_groups": state["param_groups"], "scalars": scalars}


def _restore_optimizer(
    optimizer: torch.optim.Optimizer, tensors: dict[str, torch.Tensor], info: dict[str, Any]
) -> None:
    state: dict[int, dict[str, Any]] = {}
    for key, value in [*tensors.items(), *info["scalars"].items()]:
        _, index, name = key.split(".", 2)
        state.setdefault(int(index), {})[name] = value
    optimizer.load_state_dict({"state": state, "param_groups": info["param_groups"]})


def _rng_state() -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    tensors = {"rng.torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        for i, s in enumerate(torch.cuda.get_rng_state_all()):
            tensors[f"rng.cuda.{i}"] = s
    version, internal, gauss = random.getstate()
    return tensors, {"version": version, "internal": list(internal), "gauss": gauss}


def _restore_rng(tensors: dict[str, torch.Tensor], info: dict[str, Any]) -> None:
    torch.set_rng_state(tensors["rng.torch"])
    cuda = [tensors[k] for k in sorted(k for k in tensors if k.startswith("rng.cuda."))]
    if cuda and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(cuda)
    random.setstate((info["version"], tuple(info["internal"]), info["gauss"]))


def save_training_checkpoint(
    run_dir: Path,
    model: Transformer,
    meta: CheckpointMeta,
    tokenizer_dir: Path,
    optimizer: torch.optim.Optimizer,
    state: TrainerState,
    keep_last: int,
) -> Path:
    """Write checkpoints/step_N atomically (built in a temporary folder, then renamed), then prune."""
    final = checkpoint_dir(run_dir, state.step)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=".tmp-"))
    try:
        save_checkpoint(tmp, model, meta, tokenizer_dir=tokenizer_dir)
        opt_tensors, opt_info = _optimizer_tensors(optimizer)
        rng_tensors, rng_info = _rng_state()
        save_file({**opt_tensors, **rng_tensors}, str(tmp / OPTIMIZER_FILE))
        payload = {"trainer": asdict(state), "optimizer": opt_info, "rng": rng_info}
        (tmp / STATE_FILE).write_text(json.dumps(payload, indent=1) + "\n", encoding="utf-8")
        if final.exists():
            shutil.rmtree(final)
        tmp.rename(final)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    for old in list_checkpoints(run_dir)[:-keep_last]:
        shutil.rmtree(old)
    return final


def load_training_checkpoint(path: Path, model: Transformer, optimizer: torch.optim.Optimizer) -> TrainerState:
    """Restore model, optimizer and RNG from a step checkpoint; returns the trainer state."""
    load_weights(model, path / WEIGHTS_FILE)
    try:
        payload = json.loads((path / STATE_FILE).read_text(encoding="utf-8"))
        tensors = load_file(str(path / OPTIMIZER_FILE))
    except (OSError, json.JSONDecodeError) as e:
        raise CheckpointError(path, f"cannot read the training state ({e})") from e
    device = next(model.parameters()).device
    opt = {k: v.to(device) for k, v in tensors.items() if k.startswith("state.")}
    _restore_optimizer(optimizer, opt, payload["optimizer"])
    _restore_rng({k: v for k, v in tensors.items() if k.startswith("rng.")}, payload["rng"])
    return TrainerState(**payload["trainer"])


def average_checkpoints(paths: list[Path], out: Path) -> Path:
    """Average the weights of several checkpoints of one model into a new checkpoint (§6.1)."""
    if not paths:
        raise CheckpointError(out, "no checkpoints to average")
    meta = read_meta(paths[-1])
    total: dict[str, torch.Tensor] = {}
    for path in paths:
        own = read_meta(path)
        if own.model != meta.model:
            raise CheckpointError(path, "has a different model config from the others")
        if own.weights != "float32":
            raise CheckpointError(path, "holds int8 weights (`transformer quantize`); average float checkpoints")
        model = Transformer.for_loading(meta.model)
        load_weights(model, path / WEIGHTS_FILE)
        for name, p in model.state_dict().items():
            total[name] = total.get(name, torch.zeros_like(p, dtype=torch.float64)) + p.double()
    model = Transformer.for_loading(meta.model)
    model.load_state_dict({n: (t / len(paths)).float() for n, t in total.items()})
    extra = {**meta.extra, "averaged": [p.name for p in paths]}
    return save_checkpoint(out, model, replace(meta, extra=extra), tokenizer_dir=paths[-1])
