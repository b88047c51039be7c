"""The Translator API on a tiny random checkpoint with a SentencePiece model trained on the fly."""

from __future__ import annotations

from pathlib import Path

import pytest
import sentencepiece as spm
import torch

from model.errors import ConfigError, InputError, InputTooLongError
from model.output import Output
from model.translator import Translator
from tests.conftest import make_sentences, save_random_checkpoint

FAST = {"max_len_a": 0.0, "max_len_b": 6}  # short outputs keep the tests fast


@pytest.fixture(scope="module")
def translator(checkpoint_dir: Path) -> Translator:
    return Translator.load(checkpoint_dir, device="cpu")


@pytest.fixture(scope="module")
def short_translator(tmp_path_factory: pytest.TempPathFactory, spm_dir: Path, vocab_size: int) -> Translator:
    """A model that accepts at most 16 tokens."""
    directory = save_random_checkpoint(tmp_path_factory.mktemp("short"), spm_dir, vocab_size, seed=5, max_len=16)
    return Translator.load(directory, device="cpu")


def sp_model(checkpoint_dir: Path) -> spm.SentencePieceProcessor:
    return spm.SentencePieceProcessor(model_file=str(checkpoint_dir / "spm.model"))


def test_load_gives_an_eval_float32_cpu_model(translator: Translator) -> None:
    assert translator.device == torch.device("cpu")
    assert not translator.model.training
    assert all(p.dtype == torch.float32 for p in translator.model.parameters())


def test_translate_returns_text_tokens_score_hypotheses(
    translator: Translator, checkpoint_dir: Path, sentences: list[str]
) -> None:
    sp = sp_model(checkpoint_dir)
    results = translator.translate(sentences[:3], beam_size=3, n_best=2, **FAST)
    assert len(results) == 3
    for t in results:
        assert isinstance(t, Output)
        assert len(t.hypotheses) == 2
        assert t.text == t.hypotheses[0].text and t.tokens == t.hypotheses[0].tokens
        assert t.score == t.hypotheses[0].score
        assert t.hypotheses[0].score >= t.hypotheses[1].score
        assert t.tokens != t.hypotheses[1].tokens
        assert isinstance(t.score, float) and t.score < 0
        for hyp in t.hypotheses:
            assert len(hyp.tokens) <= FAST["max_len_b"]
            assert all(isinstance(p, str) for p in hyp.tokens)
            assert hyp.text == sp.decode([sp.piece_to_id(p) for p in hyp.tokens])
            assert hyp.attention is None


def test_source_ids_are_pieces_plus_eos(translator: Translator, checkpoint_dir: Path) -> None:
    sp = sp_model(checkpoint_dir)
    text = "kalo mine ruvo"
    assert translator.encode([text]) == [sp.encode(text) + [3]]


@pytest.mark.parametrize("n_best", [1, 3])
def test_attention_maps(translator: Translator, sentences: list[str], n_best: int) -> None:
    cfg = translator.model.cfg
    results = translator.translate(sentences[:4], beam_size=3, n_best=n_best, return_attention=True, **FAST)
    for text, t in zip(sentences[:4], results, strict=True):
        for hyp in t.hypotheses:
            att = hyp.attention
            assert att is not None
            S, T = len(att.source_tokens), len(att.target_tokens)
            assert att.source_tokens == translator.tokenizer.source_pieces(text)
            assert att.source_tokens[-1] == "</s>"
            assert att.target_tokens == hyp.tokens + ["</s>"]
            assert att.cross.shape == (cfg.n_dec, cfg.h, T, S)
            assert att.encoder is not None and att.encoder.shape == (cfg.N, cfg.h, S, S)
            assert att.decoder is not None and att.decoder.shape == (cfg.n_dec, cfg.h, T, T)
            torch.testing.assert_close(att.cross.sum(-1), torch.ones(cfg.n_dec, cfg.h, T))
            torch.testing.assert_close(att.encoder.sum(-1), torch.ones(cfg.N, cfg.h, S))
            assert bool((att.decoder.triu(1) == 0).all())
            assert att.cross.dtype == torch.float32 and att.cross.device == torch.device("cpu")


def test_results_come_back_in_input_order(translator: Translator) -> None:
    texts = make_sentences(9, seed=21, min_words=1, max_words=14)
    assert len({len(translator.encode([t])[0]) for t in texts}) > 3  # lengths differ, so batches are sorted
    batched = translator.translate(texts, beam_size=2, max_batch_size=3, **FAST)
    alone = [translator.translate([t], beam_size=2, **FAST)[0] for t in texts]
    assert len({t.text for t in alone}) > 1, "the test model should depend on its input"
    assert [t.tokens for t in batched] == [t.tokens for t in alone]
    for b, a in zip(batched, alone, strict=True):
        assert b.score == pytest.approx(a.score, abs=1e-4)


def test_token_budget_splits_batches_without_changing_results(translator: Translator, sentences: list[str]) -> None:
    texts = sentences[:6]
    one_batch = translator.translate(texts, beam_size=2, **FAST)
    tiny_batches = translator.translate(texts, beam_size=2, max_batch_tokens=10, **FAST)
    assert [t.tokens for t in tiny_batches] == [t.tokens for t in one_batch]


def test_empty_list_gives_empty_list(translator: Translator) -> None:
    assert translator.translate([]) == []


def test_empty_string_is_translated(translator: Translator) -> None:
    [t] = translator.translate([""], beam_size=2, **FAST)
    assert isinstance(t.text, str)


def test_zero_length_limit_gives_an_empty_translation(translator: Translator) -> None:
    """max_len_a * |source| + max_len_b rounds down to 0 tokens for a short source: the output is empty."""
    [t] = translator.translate(["kalo"], beam_size=2, max_len_a=0.1, max_len_b=0)
    assert t.tokens == [] and t.text == ""
    assert len(t.hypotheses) == 1


def test_input_must_be_a_list_of_strings(translator: Translator) -> None:
    with pytest.raises(InputError):
        translator.translate("a single string")  # type: ignore[arg-type]
    with pytest.raises(InputError):
        translator.translate(["fine", 3])  # type: ignore[list-item]


def test_invalid_unicode_is_an_input_error(translator: Translator) -> None:
    with pytest.raises(InputError, match="lone surrogate U\\+D800 at character 3"):
        translator.translate(["abc\ud800"])


def test_a_search_stops_when_asked(translator: Translator) -> None:
    from model.errors import SearchStopped

    asked: list[int] = []
    ids = translator.encode(["kalo mine ruza"])
    with pytest.raises(SearchStopped):
        translator.search(
            ids,
            translator.decoding_config(max_len_a=0, max_len_b=20),
            stop=lambda: asked.append(1) is None and len(asked) > 3,
        )
    assert len(asked) == 4  # asked before every step: three steps ran


def test_unknown_or_bad_options_are_config_errors(translator: Translator) -> None:
    with pytest.raises(ConfigError):
        translator.translate(["kalo"], beam_sizes=3)
    with pytest.raises(ConfigError):
        translator.translate(["kalo"], beam_size=2, n_best=3)


def test_decoding_options_reach_the_search(translator: Translator, sentences: list[str]) -> None:
    [t] = translator.translate(sentences[:1], beam_size=2, max_len_a=0.0, max_len_b=3)
    assert len(t.tokens) <= 3
    [t] = translator.translate(sentences[:1], beam_size=2, max_len_a=0.0, max_len_b=8, min_length=8)
    assert len(t.tokens) == 8


def long_text(n_words: int = 40) -> str:
    return make_sentences(1, seed=3, min_words=n_words, max_words=n_words)[0]


def test_input_longer_than_the_model_limit_raises(short_translator: Translator) -> None:
    text = long_text()
    assert len(short_translator.encode([text], truncate=True)[0]) == 16
    with pytest.raises(InputTooLongError) as e:
        short_translator.translate(["kalo", text], **FAST)
    assert e.value.index == 1 and e.value.limit == 16 and e.value.length > 16
    assert isinstance(e.value, InputError)


def test_truncate_cuts_long_inputs_to_the_limit(short_translator: Translator) -> None:
    text = long_text()
    [t] = short_translator.translate([text], truncate=True, return_attention=True, beam_size=2, **FAST)
    assert t.attention is not None
    assert len(t.attention.source_tokens) == 16 and t.attention.source_tokens[-1] == "</s>"
    assert t.attention.source_tokens[:15] == short_translator.tokenizer.source_pieces(text)[:15]


def test_outputs_never_exceed_the_model_positions(short_translator: Translator) -> None:
    [t] = short_translator.translate(["kalo mine"], beam_size=2, max_len_b=100, min_length=100)
    assert len(t.tokens) <= 15


def test_bad_dtype_is_a_config_error(checkpoint_dir: Path) -> None:
    with pytest.raises(ConfigError):
        Translator.load(checkpoint_dir, device="cpu", dtype="float8")


def test_bfloat16_on_cpu_translates(checkpoint_dir: Path, sentences: list[str]) -> None:
    tr = Translator.load(checkpoint_dir, device="cpu", dtype="bfloat16")
    assert next(tr.model.parameters()).dtype == torch.bfloat16
    [t] = tr.translate(sentences[:1], beam_size=2, **FAST)
    assert isinstance(t.text, str)


def test_a_summarizer_reads_only_the_first_read_first_tokens(tmp_path: Path, spm_dir: Path, vocab_size: int) -> None:
    """ModelConfig.read_first (See et al., 2017): a document longer than the model takes is no error, and
    what it says after its first read_first - 1 pieces does not change the summary."""
    directory = save_random_checkpoint(
        tmp_path / "reader", spm_dir, vocab_size, seed=5, max_len=16, read_first=10, task="summarization"
    )
    reader = Translator.load(directory, device="cpu")
    text, other = long_text(), long_text(60)
    pieces = reader.tokenizer.source_pieces(text)
    assert len(reader.encode([text])[0]) == 10 and len(pieces) > 16
    [t] = reader.translate([text], return_attention=True, beam_size=2, **FAST)
    assert t.attention is not None and t.attention.source_tokens == [*pieces[:9], "</s>"]
    same_start = " ".join(text.split()[:12]) + " " + " ".join(other.split()[12:])
    assert reader.tokenizer.source_pieces(same_start)[:9] == pieces[:9]
    [u] = reader.translate([same_start], beam_size=2, **FAST)
    assert (u.text, u.score) == (t.text, t.score)
    assert reader.encode(["kalo mine"]) == [reader.tokenizer.encode_source("kalo mine")]  # short ones as they are
