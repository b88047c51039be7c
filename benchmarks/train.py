"""Training speed of our Transformer against transformers' MarianMTModel, same weights, batches, loss and optimizer.

One run builds a random Hugging Face Marian model, copies its very weights into ours, and trains both on the
same padded batches of random token ids the way training/trainer.py does one optimizer step (forward,
label-smoothed loss, backward, Adam with the paper's rate schedule), then prints target tokens per second
and the ratio ours / transformers. Each engine computes the label-smoothed loss (eps_ls 0.1, the same
function) with its own code: ours with training.optim.label_smoothed_loss, as our trainer does, and
transformers with its Trainer's LabelSmoother (`--peer-loss ours` gives it ours, to compare the models alone):

    python benchmarks/train.py --shape small
    python benchmarks/train.py --shape base --steps 4 --warmup-steps 2 --json base.json

Tokens/s counts the non-pad target tokens of the timed steps over their wall time. A few warm-up steps run
first, untimed; the engines then take turns (their order flipped every repeat) for --repeats rounds of
--steps steps each, and the best (fastest) and the median round are reported. Before any training, both
models compute the loss and gradients of the first batch with dropout off, so that the reader can see that
the two compute the same function.
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import json
import math
import random
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import common
import torch
from common import EOS, SHAPES, UNK, EngineResult, log, synchronize

ENGINES = ("ours", "transformers")
DTYPES = ("float32", "bfloat16")


@dataclass(frozen=True)
class Workload:
    """What every engine trains on: the same padded batches, already on the device."""

    batches: list[Any]  # training.batching.Batch
    tokens: list[int]  # non-pad target tokens of each batch
    pad: int  # also the decoder start symbol
    sentences: int  # in the synthetic corpus

    def timed(self, steps: int) -> list[int]:
        """Indices of the batches of one timed round (cycling when the corpus has fewer batches)."""
        return [i % len(self.batches) for i in range(steps)]


@dataclass
class Engine:
    """One model with its optimizer; `logits` runs the teacher-forced forward pass of a batch and returns
    the logits with the targets they are scored against (pad where a position does not count); `loss`
    is the summed label-smoothed cross-entropy of those, each engine's own code for the same function."""

    name: str
    module: torch.nn.Module
    optimizer: torch.optim.Optimizer
    logits: Callable[[Any], tuple[torch.Tensor, torch.Tensor]]
    loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    no_grad_check: tuple[str, ...] = ()  # parameters the peer does not train, left out of the gradient check
    step: int = 0  # optimizer steps taken, for the rate schedule


@dataclass
class Trained(EngineResult):
    """An engine's training steps: their timing per step, and the loss per repeat."""

    step_seconds: list[list[float]] = field(default_factory=list)  # per repeat, the wall time of each step
    losses: list[float] = field(default_factory=list)  # label-smoothed loss per target token, per repeat

    @property
    def step_min_tokens_per_s(self) -> float:
        """Over the sum, for every timed step, of its fastest time across repeats: the least disturbed
        estimate when other processes load the machine in bursts."""
        if not self.step_seconds:
            return math.nan
        return self.tokens / sum(min(times) for times in zip(*self.step_seconds, strict=True))


# -- the shared model and data ------------------------------------------------------------------------


def write_hf_model(hf_dir: Path, args: argparse.Namespace) -> Any:
    """A random OPUS-MT-like MarianMTModel (swish, scaled and tied embeddings), saved with safetensors.

    Dropout is p_drop on embeddings and sub-layer outputs, as ours; attention and activation dropout are
    0, since our model has none.
    """
    from transformers import MarianMTModel

    config = common.marian_config(
        SHAPES[args.shape],
        args.vocab_size,
        args.init_std,
        dropout=args.p_drop,
        attention_dropout=0.0,
        activation_dropout=0.0,
        encoder_layerdrop=0.0,
        decoder_layerdrop=0.0,
    )
    torch.manual_seed(args.seed)
    model = MarianMTModel._from_config(config, attn_implementation=args.hf_attention)
    model.save_pretrained(hf_dir)
    return model


def make_workload(args: argparse.Namespace, device: str) -> Workload:
    """A synthetic corpus of random ids (no special ids, each sentence ending in EOS), source lengths
    --min-src..--max-src and targets within +-(--tgt-spread) of them, grouped by training.batching."""
    from training.batching import EncodedCorpus, collate, token_batches

    rng = random.Random(args.seed)
    pad = args.vocab_size - 1
    sources, targets = [], []
    for _ in range(args.sentences):
        s = rng.randint(args.min_src, args.max_src)
        t = max(2, round(s * rng.uniform(1 - args.tgt_spread, 1 + args.tgt_spread)))
        sources.append([rng.randrange(UNK + 1, pad) for _ in range(s - 1)] + [EOS])
        targets.append([rng.randrange(UNK + 1, pad) for _ in range(t - 1)] + [EOS])
    corpus = EncodedCorpus.build(sources, targets)
    groups = token_batches(corpus, args.batch_tokens, args.seed, epoch=0)
    batches = [collate(corpus, idx, pad, pad).to(device) for idx in groups]
    tokens = [int((b.tgt_out != pad).sum()) for b in batches]
    return Workload(batches, tokens, pad, args.sentences)


# -- the engines --------------------------------------------------------------------------------------


def ours_engine(hf_dir: Path, args: argparse.Namespace) -> Engine:
    from model.hf_weights import convert_weights
    from model.marian import marian_config
    from training.optim import label_smoothed_loss, make_optimizer

    config_path = hf_dir / "config.json"
    cfg = marian_config(json.loads(config_path.read_text(encoding="utf-8")), config_path)
    assert cfg.norm == "post" and cfg.position_layout == "halves" and cfg.logits_bias and cfg.p_drop == args.p_drop
    model = convert_weights(cfg, hf_dir / "model.safetensors").to(args.device).train()
    optimizer = make_optimizer(model, args.betas, args.adam_eps)
    pad = args.vocab_size - 1

    def logits(b: Any) -> tuple[torch.Tensor, torch.Tensor]:
        if not args.ours_skips_pad:
            return model(b.src, b.src_mask, b.tgt_in), b.tgt_out
        keep = b.tgt_out != pad  # as Trainer.step: logits of the non-pad positions only, (n, V)
        return model(b.src, b.src_mask, b.tgt_in, keep), b.tgt_out[keep]

    def loss(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return label_smoothed_loss(logits, target, args.eps_ls, pad)[0]  # the trainer's

    # Marian's final_logits_bias is a buffer that transformers never trains; ours is a parameter.
    return Engine("ours", model, optimizer, logits, loss, no_grad_check=("logits_bias",))


def transformers_engine(hf_model: Any, args: argparse.Namespace) -> Engine:
    from transformers.trainer_pt_utils import LabelSmoother

    from training.optim import label_smoothed_loss, make_optimizer

    model = hf_model.to(args.device).train()
    optimizer = make_optimizer(model, args.betas, args.adam_eps)  # frozen positions get no gradient, no update

    def logits(b: Any) -> tuple[torch.Tensor, torch.Tensor]:
        # No labels (the loss is ours, from the logits) and no cache (training); the decoder's padding needs
        # no mask since it only ever follows the real tokens, which the causal mask keeps from seeing it.
        out = model(input_ids=b.src, attention_mask=b.src_mask, decoder_input_ids=b.tgt_in, use_cache=False)
        return out.logits, b.tgt_out

    pad = args.vocab_size - 1
    smoother = LabelSmoother(epsilon=args.eps_ls, ignore_index=pad)

    def own_loss(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        # transformers' Trainer's label smoothing; num_items_in_batch=1 gives the sum, not the mean
        return smoother({"logits": logits}, target, num_items_in_batch=1)

    def our_loss(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return label_smoothed_loss(logits, target, args.eps_ls, pad)[0]

    return Engine("transformers", model, optimizer, logits, our_loss if args.peer_loss == "ours" else own_loss)


# -- one optimizer step, as training/trainer.py's Trainer.step does it ---------------------------------


def autocast(args: argparse.Namespace) -> contextlib.AbstractContextManager[Any]:
    return torch.autocast(args.device, dtype=torch.bfloat16, enabled=args.dtype == "bfloat16")


def phase(name: str, on: bool) -> contextlib.AbstractContextManager[Any]:
    """A profiler range around one phase of a step, only while profiling."""
    return torch.profiler.record_function(name) if on else contextlib.nullcontext()


def train_step(
    engine: Engine, batch: Any, tokens: int, d_model: int, args: argparse.Namespace, phases: bool = False
) -> float:
    """Forward, label-smoothed loss, backward and an Adam step at the paper's rate; the summed loss."""
    from training.optim import noam_rate, set_rate

    engine.step += 1
    set_rate(engine.optimizer, noam_rate(engine.step, d_model, args.warmup))
    with autocast(args):
        with phase("forward", phases):
            logits, target = engine.logits(batch)
        with phase("loss", phases):
            loss = engine.loss(logits, target)
    with phase("backward", phases):
        (loss / tokens).backward()
    value = float(loss.detach())  # as the trainer does: one device sync per step
    with phase("optimizer", phases):
        engine.optimizer.step()
        engine.optimizer.zero_grad(set_to_none=True)
    return value


def sanity_check(engines: dict[str, Engine], wl: Workload, args: argparse.Namespace) -> dict[str, Any]:
    """Loss, logits and gradient norm of the first batch in eval mode (dropout off); weights untouched.

    The gradient norm leaves out the embedding row of <pad> (also the decoder start symbol), which differs
    by design: transformers' embedding has padding_idx=pad, so looking pad up gives its row no gradient
    (only the tied output projection does); ours has no padding_idx. It is reported on its own.
    """
    batch, tokens = wl.batches[0], wl.tokens[0]
    keep = batch.tgt_out != wl.pad
    out: dict[str, dict[str, Any]] = {}
    logits: dict[str, torch.Tensor] = {}
    for name, e in engines.items():
        e.module.eval()
        with autocast(args):
            logits[name], target = e.logits(batch)
            loss = e.loss(logits[name], target)
        if logits[name].dim() == 3:  # compare the positions that count: (n, V)
            logits[name] = logits[name][keep]
        (loss / tokens).backward()
        grads, pad_row = [], 0.0
        for n, p in e.module.named_parameters():
            if p.grad is None or n in e.no_grad_check:
                continue
            g = p.grad.float()
            if g.dim() == 2 and g.size(0) == args.vocab_size:  # the shared embedding: its pad row apart
                pad_row = float(g[wl.pad].norm())
                g = torch.cat([g[: wl.pad], g[wl.pad + 1 :]])
            grads.append(g.norm())
        out[name] = {
            "loss_per_token": float(loss) / tokens,
            "grad_norm": float(torch.stack(grads).norm()),
            "pad_row_grad_norm": pad_row,
        }
        e.optimizer.zero_grad(set_to_none=True)
        e.module.train()
    a, b = (out[n] for n in ENGINES)
    return {
        **out,
        "tokens": tokens,
        "shape": list(batch.src.shape) + [batch.tgt_in.size(1)],
        "loss_rel_diff": abs(a["loss_per_token"] - b["loss_per_token"]) / abs(b["loss_per_token"]),
        "grad_norm_rel_diff": abs(a["grad_norm"] - b["grad_norm"]) / abs(b["grad_norm"]),
        "logits_max_abs_diff": float((logits["ours"].float() - logits["transformers"].float()).abs().max()),
        "logits_max_abs": float(logits["transformers"].float().abs().max()),
    }


# -- the run ------------------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> dict[str, Any]:
    from model.transformer import Transformer

    torch.set_num_threads(args.threads)
    # Trainer.step passes keep = (tgt_out != pad) so that only the non-pad positions reach the output layer
    # and the loss, where Transformer.forward takes it; ours is trained that way unless told otherwise.
    args.ours_skips_pad = not args.ours_all_positions and "keep" in inspect.signature(Transformer.forward).parameters
    shape = SHAPES[args.shape]
    wl = make_workload(args, args.device)
    with tempfile.TemporaryDirectory(prefix="train-bench-") as tmp:
        hf_dir = Path(tmp)
        log(f"building a random Marian model ({args.shape}, vocab {args.vocab_size}) in {hf_dir}")
        hf_model = write_hf_model(hf_dir, args)
        engines = {"ours": ours_engine(hf_dir, args), "transformers": transformers_engine(hf_model, args)}
    compute = f"{args.device} {args.dtype}"
    labels = {"ours": " non-pad" if args.ours_skips_pad else "", "transformers": f" {args.hf_attention}"}
    results = {name: Trained(name, compute + labels[name]) for name in engines}
    sanity = sanity_check(engines, wl, args)
    log(f"sanity: loss rel diff {sanity['loss_rel_diff']:.2e}, logits max abs diff {sanity['logits_max_abs_diff']:.2e}")
    timed = wl.timed(args.steps)
    for name, e in engines.items():
        for i in wl.timed(args.warmup_steps):  # warm-up, not timed
            train_step(e, wl.batches[i], wl.tokens[i], shape["d_model"], args)
        synchronize(args.device)
        results[name].tokens = sum(wl.tokens[i] for i in timed)
        log(f"{name}: ready ({results[name].compute}), {args.warmup_steps} warm-up steps")
    for r in range(args.repeats):
        order = list(engines) if r % 2 == 0 else list(reversed(engines))  # who goes first alternates too
        for name in order:
            e = engines[name]
            time.sleep(0.25)  # let the previous engine's idle worker threads stop spinning
            loss, marks = 0.0, [time.perf_counter()]
            for i in timed:  # train_step syncs once per step (the loss), so steps have a wall time each
                loss += train_step(e, wl.batches[i], wl.tokens[i], shape["d_model"], args)
                if len(marks) == len(timed):
                    synchronize(args.device)
                marks.append(time.perf_counter())
            results[name].seconds.append(marks[-1] - marks[0])
            results[name].step_seconds.append([b - a for a, b in zip(marks, marks[1:], strict=False)])
            results[name].losses.append(loss / results[name].tokens)
            log(f"repeat {r + 1}/{args.repeats} {name}: {results[name].seconds[-1]:.2f} s")
    summary = report(args, wl, results, sanity)
    if args.profile:
        summary["profile"] = profile(engines, wl, args)
    return summary


def report(
    args: argparse.Namespace, wl: Workload, results: dict[str, Trained], sanity: dict[str, Any]
) -> dict[str, Any]:
    shape = SHAPES[args.shape]
    timed = wl.timed(args.steps)
    real = sum(wl.tokens[i] for i in timed)
    padded = sum(wl.batches[i].tgt_out.numel() for i in timed)
    print(
        f"shape {args.shape} (N={shape['N']}, d_model {shape['d_model']}, d_ff {shape['d_ff']}, h {shape['h']}, "
        f"vocab {args.vocab_size}), {args.threads} threads, p_drop {args.p_drop}; {args.steps} steps per repeat "
        f"from {len(wl.batches)} batches of <= {args.batch_tokens} tokens ({wl.sentences} sentences, source "
        f"{args.min_src}-{args.max_src} tokens, target +-{args.tgt_spread:.0%}), {real} target tokens per repeat "
        f"({real / padded:.0%} of the padded); best of {args.repeats} repeats after {args.warmup_steps} "
        f"warm-up steps"
    )
    print(
        f"sanity, batch 0 in eval mode ({sanity['shape'][0]} sentences, source {sanity['shape'][1]}, target "
        f"{sanity['shape'][2]}): loss/token ours {sanity['ours']['loss_per_token']:.6f} transformers "
        f"{sanity['transformers']['loss_per_token']:.6f} (rel diff {sanity['loss_rel_diff']:.1e}), logits max "
        f"abs diff {sanity['logits_max_abs_diff']:.1e} (of max |logit| {sanity['logits_max_abs']:.1f}), gradient "
        f"norm rel diff {sanity['grad_norm_rel_diff']:.1e} (all but the <pad> embedding row, whose gradient "
        f"norm is ours {sanity['ours']['pad_row_grad_norm']:.2e}, transformers "
        f"{sanity['transformers']['pad_row_grad_norm']:.2e}: padding_idx): "
        f"{'same function' if sanity['loss_rel_diff'] < 1e-3 else 'MISMATCH'}"
    )
    print(
        f"{'engine':<14} {'compute':<22} {'tokens/s':>9} {'median':>9} {'step-min':>9} {'best s':>8} "
        f"{'s/step':>7} {'loss/token':>10}"
    )
    for name, r in results.items():
        print(
            f"{name:<14} {r.compute:<22} {r.tokens_per_s:>9.1f} {r.median_tokens_per_s:>9.1f} "
            f"{r.step_min_tokens_per_s:>9.1f} {min(r.seconds):>8.2f} {min(r.seconds) / args.steps:>7.3f} "
            f"{r.losses[-1]:>10.4f}"
        )
    ours, peer = results["ours"], results["transformers"]
    ratios = {
        "ours/transformers": ours.tokens_per_s / peer.tokens_per_s,
        "ours/transformers median": ours.median_tokens_per_s / peer.median_tokens_per_s,
        "ours/transformers step-min": ours.step_min_tokens_per_s / peer.step_min_tokens_per_s,
    }
    print(
        f"ours / transformers: {ratios['ours/transformers']:.2f}x best, "
        f"{ratios['ours/transformers median']:.2f}x median, {ratios['ours/transformers step-min']:.2f}x step-min"
    )
    return {
        "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items() if k != "json"},
        "shape": shape,
        "engines": {
            name: asdict(r)
            | {
                "tokens_per_s": r.tokens_per_s,
                "median_tokens_per_s": r.median_tokens_per_s,
                "step_min_tokens_per_s": r.step_min_tokens_per_s,
            }
            for name, r in results.items()
        },
        "ratios": ratios,
        "sanity": sanity,
        "batches": len(wl.batches),
        "sentences": wl.sentences,
        "target_tokens_per_repeat": real,
        "padded_target_tokens_per_repeat": padded,
    }


PHASES = ("forward", "loss", "backward", "optimizer")


def profile(engines: dict[str, Engine], wl: Workload, args: argparse.Namespace) -> dict[str, Any]:
    """torch.profiler over --profile-steps steps of each engine, each step profiled on its own in every one
    of --profile-rounds rounds (engines taking turns): per step, every phase and op keeps its least
    disturbed round. Prints the time per phase and the ops with the most self time side by side."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    cuda = args.device.startswith("cuda")
    key = "self_device_time_total" if cuda else "self_cpu_time_total"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    d_model = SHAPES[args.shape]["d_model"]
    steps = wl.timed(args.profile_steps)
    names = list(engines)
    # (engine, step) -> phase or op -> (least ms over rounds, calls)
    best: dict[tuple[str, int], dict[str, tuple[float, int]]] = {}
    for r in range(args.profile_rounds):
        for name in names if r % 2 == 0 else list(reversed(names)):
            time.sleep(0.25)
            for k, i in enumerate(steps):
                with torch_profile(activities=activities) as prof:
                    train_step(engines[name], wl.batches[i], wl.tokens[i], d_model, args, phases=True)
                    synchronize(args.device)
                seen: dict[str, tuple[float, int]] = {}
                for ev in prof.key_averages():
                    # Phases: wall time of the CPU range (on CUDA a phase also has a device-side entry).
                    ms = ev.cpu_time_total / 1e3 if ev.key in PHASES else getattr(ev, key) / 1e3
                    if ev.key not in seen or ms > seen[ev.key][0]:
                        seen[ev.key] = (ms, ev.count)
                kept = best.setdefault((name, k), seen)
                for op, (ms, count) in seen.items():
                    if op not in kept or ms < kept[op][0]:
                        kept[op] = (ms, count)
    n = len(steps)
    per: dict[str, dict[str, tuple[float, int]]] = {name: {} for name in names}  # per step, averaged
    for (name, _), ops in best.items():
        for op, (ms, count) in ops.items():
            total_ms, total_count = per[name].get(op, (0.0, 0))
            per[name][op] = (total_ms + ms / n, total_count + count)
    per = {name: {op: (ms, count // n) for op, (ms, count) in ops.items()} for name, ops in per.items()}
    phases = {name: {p: per[name].get(p, (0.0, 0))[0] for p in PHASES} for name in names}
    ops = {name: {op: v for op, v in per[name].items() if op not in PHASES} for name in names}
    print(
        f"\nprofile, ms per step over {n} steps, each step's fastest of {args.profile_rounds} rounds "
        f"({'CUDA' if cuda else 'CPU'} wall time per phase):"
    )
    print(f"{'phase':<12}" + "".join(f"{name:>14}" for name in names) + f"{'ratio':>8}")
    for p in (*PHASES, "total"):
        t = [sum(phases[name].values()) if p == "total" else phases[name][p] for name in names]
        print(f"{p:<12}" + "".join(f"{x:>14.1f}" for x in t) + f"{t[0] / t[1] if t[1] else math.nan:>8.2f}")
    top: list[str] = []
    for name in names:
        for op, _ in sorted(ops[name].items(), key=lambda kv: -kv[1][0])[: args.profile]:
            if op not in top:
                top.append(op)
    top.sort(key=lambda op: -max(ops[name].get(op, (0.0, 0))[0] for name in names))
    print(f"\ntop ops by {'self CUDA' if cuda else 'self CPU'} ms per step (calls per step in brackets):")
    print(f"{'op':<46}" + "".join(f"{name:>20}" for name in names))
    for op in top:
        cells = []
        for name in names:
            ms, count = ops[name].get(op, (0.0, 0))
            cells.append(f"{ms:>12.1f} ({count:>4})" if count else f"{'-':>20}")
        print(f"{op[:45]:<46}" + "".join(cells))
    sums = [sum(ms for ms, _ in ops[name].values()) for name in names]
    print(f"{'all ops':<46}" + "".join(f"{x:>12.1f} {'':>6}" for x in sums))
    return {
        "phases_ms": phases,
        "ops_ms": {name: {op: ops[name][op][0] for op in top if op in ops[name]} for name in names},
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    p.add_argument("--shape", choices=sorted(SHAPES), default="base")
    p.add_argument("--threads", type=int, default=2, help="CPU threads (torch.set_num_threads)")
    p.add_argument("--steps", type=int, default=20, help="timed optimizer steps per repeat and engine")
    p.add_argument(
        "--warmup-steps",
        type=int,
        default=None,
        help="untimed steps per engine before the repeats; default 3 on CPU, and on CUDA every timed "
        "batch once (each new shape costs cuDNN plan building)",
    )
    p.add_argument("--repeats", type=int, default=3, help="the fastest repeat is reported, and the median")
    p.add_argument(
        "--batch-tokens",
        type=int,
        default=4096,
        help="source and target tokens per batch each, padding included (training.batching)",
    )
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument(
        "--dtype",
        choices=DTYPES,
        default="float32",
        help="bfloat16: float32 weights under torch.autocast, as the trainer does on CUDA",
    )
    p.add_argument("--vocab-size", type=int, default=8000)
    p.add_argument("--p-drop", type=float, default=0.1, help="dropout on embeddings and sub-layer outputs")
    p.add_argument(
        "--hf-attention", choices=("sdpa", "eager"), default="sdpa", help="transformers' attention implementation"
    )
    p.add_argument(
        "--peer-loss",
        choices=("transformers", "ours"),
        default="transformers",
        help="transformers' loss code: its Trainer's LabelSmoother, or ours (compares the models alone)",
    )
    p.add_argument(
        "--ours-all-positions",
        action="store_true",
        help="ours computes the logits of every target position, padding included, as transformers "
        "does, instead of only the non-pad ones as Trainer.step has it (Transformer.forward keep)",
    )
    p.add_argument("--init-std", type=float, default=0.02, help="std of the random weights")
    p.add_argument(
        "--sentences",
        type=int,
        default=4000,
        help="size of the synthetic corpus; the timed steps take its (shuffled) batches in turn",
    )
    p.add_argument("--min-src", type=int, default=5, help="shortest source, EOS included")
    p.add_argument("--max-src", type=int, default=60, help="longest source, EOS included")
    p.add_argument("--tgt-spread", type=float, default=0.2, help="target length = source length x (1 +- this)")
    p.add_argument("--warmup", type=int, default=4000, help="warmup of the learning-rate schedule (noam_rate)")
    common.add_run_options(p, "each engine (that many ops for each)")
    p.add_argument("--profile-steps", type=int, default=3, help="steps profiled per engine and round")
    p.add_argument(
        "--profile-rounds",
        type=int,
        default=3,
        help="profiled rounds per engine; each step keeps its fastest round, op by op",
    )
    args = p.parse_args(argv)
    args.betas, args.adam_eps, args.eps_ls = (0.9, 0.98), 1e-9, 0.1  # training.config.TrainConfig's defaults
    if args.device == "cuda" and not torch.cuda.is_available():
        p.error(
            "--device cuda, but torch sees no GPU (this torch build: "
            f"{torch.__version__}, CUDA {torch.version.cuda or 'none'}); run with --device cpu"
        )
    if not 2 <= args.min_src <= args.max_src:
        p.error("need 2 <= --min-src <= --max-src")
    if args.sentences < 1:
        p.error("need --sentences >= 1")
    if not 0 <= args.tgt_spread < 1:
        p.error("need 0 <= --tgt-spread < 1")
    if args.warmup_steps is None:
        args.warmup_steps = args.steps if args.device == "cuda" else 3
    if args.steps < 1 or args.repeats < 1 or args.warmup_steps < 0:
        p.error("need --steps >= 1, --repeats >= 1, --warmup-steps >= 0")
    return args


def main(argv: list[str] | None = None) -> None:
    common.main(run, parse_args(argv))


if __name__ == "__main__":
    main()
