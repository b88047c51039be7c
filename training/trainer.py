"""The training loop (§5): token batches, gradient accumulation, Adam with warmup, label smoothing,
bf16 on CUDA, data parallel over torch.distributed, checkpoints with exact resume."""

from __future__ import annotations

import contextlib
import json
import os
import random
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from tqdm import tqdm

from model.checkpoint import CheckpointMeta, read_meta, save_checkpoint
from model.transformer import Transformer
from model.translator import Translator
from training.batching import collate, token_batches
from training.checkpoints import (
    TrainerState,
    list_checkpoints,
    load_training_checkpoint,
    save_training_checkpoint,
)
from training.config import TrainConfig, TrainConfigError
from training.evaluate import Scores, corpus_loss, evaluate, evaluate_checkpoint
from training.optim import label_smoothed_loss, make_optimizer, noam_rate, set_rate
from training.plot import plot_curves
from training.prepare import Prepared, prepare

METRICS_FILE = "metrics.jsonl"


@dataclass(frozen=True)
class Cluster:
    """This process's place in a torchrun launch (one process when not launched by torchrun)."""

    rank: int = 0
    world: int = 1
    device: torch.device = torch.device("cpu")

    @property
    def main(self) -> bool:
        return self.rank == 0


def start_cluster(device: str) -> Cluster:
    """Join the process group torchrun describes in the environment: NCCL on CUDA, gloo on CPU."""
    use_cuda = torch.cuda.is_available() if device == "auto" else device.startswith("cuda")
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    dev = torch.device(f"cuda:{local}" if use_cuda else "cpu")
    if use_cuda:
        torch.cuda.set_device(dev)
    if world > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if use_cuda else "gloo")
    return Cluster(rank, world, dev)


class MetricsLog:
    """metrics.jsonl: one JSON object per logged step or evaluation."""

    def __init__(self, path: Path, enabled: bool) -> None:
        self.path = path
        self.enabled = enabled

    def truncate(self, step: int) -> None:
        """Forget entries after `step`, which a killed run wrote after its last checkpoint."""
        if self.enabled and self.path.is_file():
            rows = [r for r in self.read() if r.get("step", 0) <= step]
            self.path.write_text("".join(json.dumps(r) + "\n" for r in rows))

    def read(self) -> list[dict[str, Any]]:
        if not self.path.is_file():
            return []
        return [json.loads(line) for line in self.path.read_text().splitlines() if line.strip()]

    def write(self, row: dict[str, Any]) -> None:
        if self.enabled:
            with self.path.open("a") as f:
                f.write(json.dumps(row) + "\n")


class Trainer:
    """One training run; `run()` trains to max_steps (or max_minutes) and returns the run directory."""

    def __init__(self, cfg: TrainConfig) -> None:
        self.cfg = cfg
        self.run_dir = Path(cfg.run_dir)
        self.cluster = start_cluster(cfg.device)
        self.progress = cfg.progress and self.cluster.main
        self.data = self._prepare()
        tok = self.data.tokenizer
        self.model_cfg = cfg.model_config(len(tok.source), len(tok.target))
        self.meta = CheckpointMeta(
            self.model_cfg,
            tok.cfg,
            cfg.task,
            cfg.source_lang,
            cfg.target_lang,
            extra={"train_config": cfg.to_dict()},
            decoding=cfg.decoding_config(),
        )
        torch.manual_seed(cfg.seed)
        self.model = Transformer(self.model_cfg).to(self.cluster.device)
        torch.manual_seed(cfg.seed + self.cluster.rank)  # dropout differs across ranks
        random.seed(cfg.seed + self.cluster.rank)
        self.optimizer = make_optimizer(self.model, cfg.betas, cfg.adam_eps)
        self.state = TrainerState(data_key=cfg.data_key())
        self.log = MetricsLog(self.run_dir / METRICS_FILE, self.cluster.main)
        self.net: torch.nn.Module = self.model
        if self.cluster.world > 1:
            self.net = DistributedDataParallel(self.model)
        use_bf16 = cfg.dtype == "bfloat16" or (cfg.dtype == "auto" and self.cluster.device.type == "cuda")
        self.autocast = torch.autocast(self.cluster.device.type, dtype=torch.bfloat16, enabled=use_bf16)

    def _prepare(self) -> Prepared:
        """Rank 0 builds the corpus (cached in run_dir/data); the other ranks wait, then read it."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        shape = self.cfg.model_config(16, 16)  # max_len and read_first: the vocabulary is not built yet
        if self.cluster.main:
            data = prepare(self.cfg, shape, self.progress)
        self._barrier()
        if not self.cluster.main:
            data = prepare(self.cfg, shape, progress=False, build=False)
        return data

    def _barrier(self) -> None:
        if self.cluster.world > 1:
            dist.barrier()

    def resume(self) -> bool:
        """Continue from the newest checkpoint of run_dir, if any."""
        found = list_checkpoints(self.run_dir)
        if not found:
            return False
        saved = read_meta(found[-1]).model.to_dict()
        changed = {k: (saved.get(k), v) for k, v in self.model_cfg.to_dict().items() if saved.get(k) != v}
        if changed:  # the weights would not fit, or would be read as another model's
            shown = ", ".join(f"{k}: {a!r} -> {b!r}" for k, (a, b) in changed.items())
            raise TrainConfigError(
                f"{self.run_dir} holds checkpoints of another model ({shown}): pass --no-resume "
                "to start afresh there, or choose another run_dir"
            )
        self.state = load_training_checkpoint(found[-1], self.model, self.optimizer)
        self.log.truncate(self.state.step)
        if self.progress:
            print(f"resuming from {found[-1]}", flush=True)
        return True

    def batches(self) -> Iterator[list[list[int]]]:
        """This rank's groups of `accumulate` batches, from the saved data position onwards."""
        per_step = self.cfg.accumulate * self.cluster.world
        while True:
            epoch = token_batches(self.data.train, self.cfg.batch_tokens, self.cfg.seed, self.state.epoch)
            steps = len(epoch) // per_step
            if steps == 0:
                raise TrainConfigError(
                    f"the training set ({len(self.data.train)} pairs) is smaller than one step's "
                    f"batches: lower batch_tokens ({self.cfg.batch_tokens}) or accumulate"
                )
            while self.state.batch_in_epoch < steps:
                start = self.state.batch_in_epoch * per_step + self.cluster.rank * self.cfg.accumulate
                self.state.batch_in_epoch += 1  # counted before the step, so a checkpoint after it skips it
                yield epoch[start : start + self.cfg.accumulate]
            self.state.epoch += 1
            self.state.batch_in_epoch = 0

    def step(self, group: list[list[int]]) -> tuple[float, float, int]:
        """One optimizer step over a group of batches: summed loss and NLL, and target tokens."""
        special = self.data.tokenizer.special
        batches = [collate(self.data.train, idx, special.pad, special.decoder_start) for idx in group]
        tokens = torch.tensor(
            sum(int((b.tgt_out != special.pad).sum()) for b in batches), dtype=torch.float64, device=self.cluster.device
        )  # NCCL reduces device tensors only
        if self.cluster.world > 1:
            dist.all_reduce(tokens)
        set_rate(
            self.optimizer, noam_rate(self.state.step + 1, self.model_cfg.d_model, self.cfg.warmup, self.cfg.lr_scale)
        )
        total_loss = total_nll = 0.0
        for i, b in enumerate(batches):
            b = b.to(self.cluster.device)
            sync = i == len(batches) - 1 or not isinstance(self.net, DistributedDataParallel)
            with contextlib.nullcontext() if sync else self.net.no_sync(), self.autocast:  # type: ignore[operator]
                keep = b.tgt_out != special.pad
                logits = self.net(b.src, b.src_mask, b.tgt_in, keep)  # (n, V): padding skipped
                loss, nll = label_smoothed_loss(logits, b.tgt_out[keep], self.cfg.eps_ls, special.pad)
            # DDP averages gradients over ranks, so scale by world / global tokens for a per-token mean.
            (loss * (self.cluster.world / float(tokens))).backward()
            total_loss += float(loss.detach())
            total_nll += float(nll)
        if self.cluster.world > 1:  # every rank's share, for the log
            sums = torch.tensor([total_loss, total_nll], dtype=torch.float64, device=self.cluster.device)
            dist.all_reduce(sums)
            total_loss, total_nll = sums.tolist()
        if self.cfg.clip_norm:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.clip_norm)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return total_loss, total_nll, int(tokens)

    def run(self, resume: bool = True) -> Path:
        if resume:
            self.resume()
        self.net.train()
        cfg, state = self.cfg, self.state
        bar = tqdm(
            total=projected_steps(cfg, state.step, state.elapsed),
            initial=state.step,
            disable=not self.progress,
            unit="step",
            dynamic_ncols=True,
            mininterval=0.5 if sys.stderr.isatty() else 30.0,
        )
        window = {"loss": 0.0, "nll": 0.0, "tokens": 0, "time": 0.0}
        batches = self.batches()
        while state.step < cfg.max_steps:
            began = time.perf_counter()
            loss, nll, tokens = self.step(next(batches))
            spent = time.perf_counter() - began
            state.step += 1
            state.tokens += tokens
            state.elapsed += spent
            for k, v in (("loss", loss), ("nll", nll), ("tokens", tokens), ("time", spent)):
                window[k] += v
            bar.update(1)
            if cfg.max_minutes and state.step % 10 == 0:  # the bar ends where the first budget does
                bar.total = projected_steps(cfg, state.step, state.elapsed)
            out_of_time = bool(cfg.max_minutes) and state.elapsed >= 60 * cfg.max_minutes
            last = state.step == cfg.max_steps or out_of_time
            if state.step % cfg.log_every == 0 or last:
                row = self._log_row(window)
                bar.set_postfix(loss=f"{row['loss']:.3f}", lr=f"{row['lr']:.2e}", tok_s=f"{row['tokens_per_s']:.0f}")
                window = dict.fromkeys(window, 0.0)
            if state.step % cfg.eval_every == 0 or last:
                scores = self.evaluate_dev()
                if scores is not None and self.progress:
                    bar.write(
                        f"step {state.step}: dev loss {scores.loss:.3f}, ppl {scores.ppl:.2f}, "
                        f"{scores.main} {scores.score:.2f}"
                    )
            if state.step % cfg.save_every == 0 or last:
                self.save()
            if out_of_time:
                break
        bar.close()
        if self.cluster.main and self.data.test_pairs and (self.run_dir / "best").is_dir():
            self.test_best()
        return self.run_dir

    def test_best(self) -> dict[str, float | str]:
        """Score run_dir/best on the held-out test split into test_scores.json."""
        scores = evaluate_checkpoint(
            self.run_dir / "best",
            self.data.test_pairs,
            self.cfg.eval_beam_size,
            str(self.cluster.device),
            self.cfg.batch_tokens,
            "test" if self.progress else None,
        )
        scores = {"checkpoint": "best", "step": self.state.best_step or 0, **scores}
        (self.run_dir / "test_scores.json").write_text(json.dumps(scores, indent=1) + "\n")
        if self.progress:
            print(f"test: {json.dumps(scores)}", flush=True)
        return scores

    def _log_row(self, window: dict[str, float]) -> dict[str, Any]:
        tokens = max(window["tokens"], 1)
        row = {
            "step": self.state.step,
            "loss": window["loss"] / tokens,
            "nll": window["nll"] / tokens,
            "ppl": float(torch.tensor(window["nll"] / tokens).exp()),
            "lr": self.optimizer.param_groups[0]["lr"],
            "tokens_per_s": window["tokens"] / max(window["time"], 1e-9),
            "elapsed": self.state.elapsed,
        }
        if self.cluster.device.type == "cuda":
            row["max_memory_gb"] = torch.cuda.max_memory_allocated(self.cluster.device) / 2**30
        self.log.write(row)
        return row

    def evaluate_dev(self) -> Scores | None:
        """Dev loss and beam-search score on rank 0; keeps run_dir/best when the score improves."""
        scores = None
        if self.cluster.main and len(self.data.dev):
            special = self.data.tokenizer.special
            loss = corpus_loss(self.model, self.data.dev, special.pad, special.decoder_start, self.cfg.batch_tokens)
            pairs = self.data.dev_pairs[: self.cfg.eval_max_sentences]
            # Decoded in the weights' own dtype, outside autocast: the beam search's caches take the model's
            # dtype, and the score is that of the checkpoint kept as best.
            translator = Translator(self.model, self.data.tokenizer, self.meta)
            scores, _ = evaluate(
                translator,
                [p.source for p in pairs],
                [p.target for p in pairs],
                loss,
                self.cfg.eval_beam_size,
                self.cfg.task,
                "dev" if self.progress else None,
            )
            self.log.write({"step": self.state.step, **scores.as_dict()})
            if self.state.best_score is None or scores.score > self.state.best_score:
                self.state.best_score, self.state.best_step = scores.score, self.state.step
                save_checkpoint(self.run_dir / "best", self.model, self.meta, self.data.tokenizer_dir)
            plot_curves(self.log.read(), self.run_dir / "curves.png", scores.main)
        self._barrier()
        return scores

    def save(self) -> None:
        if self.cluster.main:
            save_training_checkpoint(
                self.run_dir,
                self.model,
                self.meta,
                self.data.tokenizer_dir,
                self.optimizer,
                self.state,
                self.cfg.keep_last,
            )
        self._barrier()


def projected_steps(cfg: TrainConfig, step: int, elapsed: float) -> int:
    """Where training will stop: max_steps, or sooner where max_minutes ends first at the pace so far."""
    if not cfg.max_minutes or elapsed <= 0:
        return cfg.max_steps
    by_time = step + int((60 * cfg.max_minutes - elapsed) * step / elapsed)
    return max(step, min(cfg.max_steps, by_time))


def refuse_stale_run(cfg: TrainConfig) -> None:
    """TrainConfigError when run_dir holds checkpoints of a run on other data: resuming would load weights made
    for another corpus and vocabulary (the shapes may even match), and the new corpus would replace the old."""
    run_dir = Path(cfg.run_dir)
    key = run_dir / "data" / "key"
    if list_checkpoints(run_dir) and key.is_file() and key.read_text() != cfg.data_key():
        raise TrainConfigError(
            f"{run_dir} holds checkpoints trained on other data (the data, clean, split or vocab "
            "settings changed): pass --no-resume to start afresh there, or choose another run_dir"
        )


def train(cfg: TrainConfig, resume: bool = True) -> Path:
    """Train (resuming from run_dir's newest checkpoint unless resume is False); returns run_dir."""
    if resume:
        refuse_stale_run(cfg)
    trainer = Trainer(cfg)
    try:
        return trainer.run(resume)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
