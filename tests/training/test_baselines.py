"""Summarization is scored beside the baselines any user has without a model: lead-1 and lead-k-words."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from service.cli import main
from tests.conftest import SPM_VOCAB, save_random_checkpoint
from training.evaluate import LEAD_WORDS, baselines, lead_sentence, lead_words


def test_lead_sentence_and_words() -> None:
    assert lead_sentence("  Return the size. It counts items!  ") == "Return the size."
    assert lead_sentence("v1.2 is out? Yes.") == "v1.2 is out?"
    assert lead_words(" ".join(map(str, range(30)))) == " ".join(map(str, range(LEAD_WORDS)))


def test_baselines_score_the_leads_against_the_references() -> None:
    docs = ["Return the size of the queue. Items in flight count too.", "Open the file. Then read it."]
    scores = baselines(docs, ["Return the size of the queue.", "Open the file."])
    assert scores["lead-1"] == pytest.approx({"rouge1": 100.0, "rouge2": 100.0, "rougeL": 100.0})
    assert 0 < scores[f"lead-{LEAD_WORDS}-words"]["rougeL"] < 100


def test_evaluate_prints_the_baselines_beside_a_summarizer(
    tmp_path: Path, spm_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = save_random_checkpoint(
        tmp_path / "sum", spm_dir, SPM_VOCAB, seed=2, task="summarization", source_lang="en", target_lang="en"
    )
    data = tmp_path / "test.jsonl"
    data.write_text(
        "".join(json.dumps({"source": "kalo mine. ruza vo sa ti", "target": "kalo mine"}) + "\n" for _ in range(3))
    )
    assert main(["evaluate", "--model", str(model), "--data", str(data), "--beam-size", "1"]) == 0
    scores = json.loads(capsys.readouterr().out)
    assert {"rouge1", "rouge2", "rougeL"} <= set(scores)
    assert scores["baselines"]["lead-1"]["rougeL"] == pytest.approx(100.0)
    assert set(scores["baselines"]) == {"lead-1", f"lead-{LEAD_WORDS}-words"}
