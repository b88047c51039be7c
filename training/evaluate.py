"""Evaluation: loss and perplexity, sacreBLEU and chrF for translation, ROUGE for summarization."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from model.transformer import Transformer
from model.translator import Translator
from training.batching import EncodedCorpus, collate, token_batches
from training.data import Pair
from training.optim import label_smoothed_loss
from training.prepare import encode

EVAL_CHUNK = 64  # sentences decoded between two updates of an evaluation's progress bar


@dataclass(frozen=True)
class Scores:
    """Metrics of one evaluation; `main` is the one that picks the best checkpoint."""

    loss: float  # mean NLL per target token
    ppl: float
    metrics: dict[str, float] = field(default_factory=dict)  # bleu, chrf or rouge1, rouge2, rougeL
    main: str = "bleu"
    signature: str = ""

    @property
    def score(self) -> float:
        return self.metrics.get(self.main, -self.loss)

    def as_dict(self) -> dict[str, float | str]:
        return {"dev_loss": self.loss, "dev_ppl": self.ppl, **self.metrics, "signature": self.signature}


@torch.inference_mode()
def corpus_loss(model: Transformer, corpus: EncodedCorpus, pad: int, start: int, batch_tokens: int) -> float:
    """Mean negative log-likelihood per target token (no label smoothing)."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    nll = tokens = 0.0
    for indices in token_batches(corpus, batch_tokens, seed=0, epoch=0):
        b = collate(corpus, indices, pad, start).to(device)
        _, batch_nll = label_smoothed_loss(model(b.src, b.src_mask, b.tgt_in), b.tgt_out, 0.0, pad)
        nll += float(batch_nll)
        tokens += int((b.tgt_out != pad).sum())
    model.train(was_training)
    return nll / max(tokens, 1)


def bleu_chrf(
    hypotheses: Sequence[str], references: Sequence[str], target_lang: str | None = None
) -> tuple[dict[str, float], str]:
    """Corpus sacreBLEU and chrF, with sacreBLEU's signature."""
    from sacrebleu.metrics import BLEU, CHRF

    tokenize = "ja-mecab" if target_lang == "ja" else "zh" if target_lang == "zh" else "13a"
    bleu, chrf = BLEU(tokenize=tokenize), CHRF()
    b = bleu.corpus_score(list(hypotheses), [list(references)])
    c = chrf.corpus_score(list(hypotheses), [list(references)])
    return {"bleu": b.score, "chrf": c.score}, f"{bleu.get_signature()} | {chrf.get_signature()}"


def rouge(hypotheses: Sequence[str], references: Sequence[str]) -> tuple[dict[str, float], str]:
    """Mean ROUGE-1, ROUGE-2 and ROUGE-L F1 (x100), Porter-stemmed, as the rouge-score package computes."""
    from rouge_score import rouge_scorer

    names = ("rouge1", "rouge2", "rougeL")
    scorer = rouge_scorer.RougeScorer(list(names), use_stemmer=True)
    totals = dict.fromkeys(names, 0.0)
    for hyp, ref in zip(hypotheses, references, strict=True):
        for name, s in scorer.score(ref, hyp).items():
            totals[name] += s.fmeasure
    n = max(len(hypotheses), 1)
    return {k: 100 * v / n for k, v in totals.items()}, "rouge-score|F1|stemmer:yes"


LEAD_WORDS = 12  # the lead-k-words baseline's k: about a summary line's length in the built-in corpora
SENTENCE_END = re.compile(r"(?<=[.!?])\s")


def lead_sentence(document: str) -> str:
    """The document's first sentence: up to the first ., ! or ? followed by a space."""
    return SENTENCE_END.split(document.strip(), maxsplit=1)[0]


def lead_words(document: str, k: int = LEAD_WORDS) -> str:
    return " ".join(document.split()[:k])


def baselines(documents: Sequence[str], references: Sequence[str]) -> dict[str, dict[str, float]]:
    """ROUGE of the summaries any user could make without a model, on the same documents: the first sentence
    (lead-1) and the first LEAD_WORDS words. A summarizer worth using beats both."""
    return {
        "lead-1": rouge([lead_sentence(d) for d in documents], references)[0],
        f"lead-{LEAD_WORDS}-words": rouge([lead_words(d) for d in documents], references)[0],
    }


def evaluate(
    translator: Translator,
    sources: Sequence[str],
    references: Sequence[str],
    loss: float,
    beam_size: int = 4,
    task: str = "translation",
    progress: str | None = None,
) -> tuple[Scores, list[str]]:
    """Decode the sources with beam search and score them against the references; progress: a bar's label."""
    was_training = translator.model.training
    translator.model.eval()
    hyps: list[str] = []
    with tqdm(total=len(sources), desc=progress, unit=" sentences", disable=progress is None, leave=False) as bar:
        for start in range(0, len(sources), EVAL_CHUNK):
            chunk = list(sources[start : start + EVAL_CHUNK])
            hyps += [t.text for t in translator.translate(chunk, beam_size=beam_size, truncate=True)]
            bar.update(len(chunk))
    translator.model.train(was_training)
    if task == "summarization":
        metrics, signature = rouge(hyps, references)
        main = "rougeL"
    else:
        metrics, signature = bleu_chrf(hyps, references, translator.meta.target_lang)
        main = "bleu"
    ppl = math.exp(min(loss, 50.0))
    return Scores(loss, ppl, metrics, main, signature), hyps


def evaluate_checkpoint(
    path: str | Path,
    pairs: Sequence[Pair],
    beam_size: int = 4,
    device: str | None = None,
    batch_tokens: int = 4096,
    progress: str | None = None,
) -> dict[str, Any]:
    """Scores of a saved checkpoint on held-out pairs: loss, perplexity, and BLEU/chrF or ROUGE."""
    translator = Translator.load(path, device=device)
    tok, special = translator.tokenizer, translator.tokenizer.special
    corpus = encode(tok, list(pairs), translator.model.cfg, "encoding", progress=False)
    loss = corpus_loss(translator.model, corpus, special.pad, special.decoder_start, batch_tokens)
    sources, targets = [p.source for p in pairs], [p.target for p in pairs]
    scores, _ = evaluate(translator, sources, targets, loss, beam_size, translator.meta.task, progress)
    out: dict[str, Any] = {"sentences": len(pairs), **scores.as_dict()}
    if translator.meta.task == "summarization":
        out["baselines"] = baselines(sources, targets)
    return out
