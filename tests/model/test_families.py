"""`transformer import` of M2M100, NLLB, mBART-50 and Pegasus, checked against transformers itself.

Each family's model is random and small (tests/model/hf_families.py), saved with its real tokenizer files.
Ours must tokenize as transformers does, give the same logits, and find the same greedy and beam-4 outputs
with the target language forced as transformers' forced_bos_token_id forces it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file, save_file

from model.checkpoint import read_meta
from model.errors import CheckpointError, ConfigError, UnknownLanguageError
from model.families import import_model
from model.hf_weights import INDEX_FILE
from model.translator import Translator
from service.cli import main
from tests.conftest import make_sentences
from tests.model.hf_families import FAMILIES, Family, build_family_dir

MAX_NEW_TOKENS = 40


@pytest.fixture(scope="module", params=FAMILIES)
def family(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Family:
    return build_family_dir(request.param, tmp_path_factory.mktemp(request.param))


@pytest.fixture(scope="module")
def imported(family: Family, tmp_path_factory: pytest.TempPathFactory) -> Path:
    task = "summarization" if family.name in ("pegasus", "bart") else None
    return import_model(family.hf_dir, tmp_path_factory.mktemp("ours") / family.name, task=task)


@pytest.fixture(scope="module")
def translator(imported: Path) -> Translator:
    return Translator.load(imported, device="cpu")


@pytest.fixture(scope="module")
def texts() -> list[str]:
    return make_sentences(200, seed=31, min_words=1, max_words=14)


def hf_generate(family: Family, texts: list[str], beams: int) -> list[list[int] | None]:
    """transformers' search: each text's best output, ids after the start symbol and the forced language, EOS
    left out; None where it reached the length limit (transformers then forces an EOS, ours does not)."""
    options: dict[str, Any] = {"forced_bos_token_id": family.forced} if family.forced is not None else {}
    enc = family.tokenizer(texts, return_tensors="pt", padding=True)
    with torch.no_grad():
        out = family.model.generate(
            **enc,
            num_beams=beams,
            length_penalty=1.0,
            early_stopping=True,
            max_new_tokens=MAX_NEW_TOKENS,
            bad_words_ids=[[family.pad]],
            do_sample=False,
            **options,
        ).tolist()
    skip = 1 + (family.forced is not None)
    return [row[skip : row.index(family.eos, 1)] if family.eos in row[1:] else None for row in out]


def our_generate(translator: Translator, family: Family, texts: list[str], beams: int) -> list[list[int]]:
    results = translator.translate(
        texts,
        beam_size=beams,
        length_penalty=1.0,
        length_penalty_form="average",
        max_len_a=0,
        max_len_b=MAX_NEW_TOKENS - 1,
        early_stopping=True,
        no_repeat_ngram_size=0,
        min_length=0,
        source_lang=family.source,
        target_lang=family.target,
    )
    return [translator.tokenizer.target.to_ids(t.hypotheses[0].tokens) for t in results]


def test_source_ids_equal_the_family_tokenizer(translator: Translator, family: Family, texts: list[str]) -> None:
    languages = translator.languages(family.source, family.target)
    for text in [*texts, "", "ka lo  mi", "ñandú kalo", "KALO 123 !?"]:
        assert translator.tokenizer.encode_source(text, languages.source) == family.tokenizer(text).input_ids, text
    assert languages.target == (() if family.forced is None else (family.forced,))


@torch.no_grad()
def test_logits_equal_transformers_on_a_padded_batch(translator: Translator, family: Family, texts: list[str]) -> None:
    enc = family.tokenizer(texts[:6], return_tensors="pt", padding=True)
    assert not bool(enc["attention_mask"].bool().all())  # the batch is padded
    vocab = translator.model.cfg.tgt_vocab_size
    tgt = torch.randint(4, vocab, (6, 9), generator=torch.Generator().manual_seed(0))
    tgt[:, 0] = family.start
    theirs = family.model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"], decoder_input_ids=tgt)
    ours = translator.model(enc["input_ids"], enc["attention_mask"].bool(), tgt)
    torch.testing.assert_close(ours, theirs.logits, atol=1e-4, rtol=0)


@pytest.mark.parametrize("beams", [1, 4])
def test_search_equals_transformers_generate(
    translator: Translator, family: Family, texts: list[str], beams: int
) -> None:
    theirs = hf_generate(family, texts, beams)
    ours = our_generate(translator, family, texts, beams)
    compared = [(a, b) for a, b in zip(ours, theirs, strict=True) if b is not None]
    assert len(compared) >= 0.95 * len(texts)  # few reach the limit
    assert sum(a == b for a, b in compared) >= 0.99 * len(compared)
    # Not trivial: the outputs follow the sources and end at various lengths.
    assert len({tuple(b) for _, b in compared}) >= 10 and len({len(b) for _, b in compared}) >= 4


def test_pairs_mix_in_one_search_each_as_alone(translator: Translator, family: Family, texts: list[str]) -> None:
    """Continuous batching mixes language pairs: each row is forced to its own target language."""
    if not translator.tokenizer.multilingual:  # one pair: the same ids whatever codes a caller names
        assert translator.languages("xx", "yy") == translator.languages()
        return
    codes = sorted(translator.tokenizer.language_ids)
    targets = [family.target, codes[0], codes[-1]]
    alone = {t: translator.translate(texts[:6], beam_size=4, source_lang=family.source, target_lang=t) for t in targets}
    loop = translator.loop(4)
    cfg = translator.decoding_config(beam_size=4)
    ids, cfgs, tags = [], [], []
    for t in targets:
        languages = translator.languages(family.source, t)
        ids += translator.encode(texts[:6], languages=languages)
        cfgs += [translator.decoding_config(cfg, target_prefix=languages.target)] * 6
        tags += [(t, i) for i in range(6)]
    loop.admit(ids, cfgs, tags)
    mixed: dict[Any, list[int]] = {}
    while loop:
        mixed.update((s.tag, s.n_best()[0].ids) for s in loop.step())
    for t in targets:
        want = [translator.tokenizer.target.to_ids(o.hypotheses[0].tokens) for o in alone[t]]
        assert [mixed[(t, i)] for i in range(6)] == want, t
    assert alone[codes[0]] != alone[codes[-1]]  # the target language changes the output


def test_imported_meta(imported: Path, family: Family) -> None:
    meta = read_meta(imported)
    data = json.loads((imported / "config.json").read_text(encoding="utf-8"))
    assert data["extra"]["imported_from"] in ("m2m_100", "mbart", "pegasus", "bart")
    assert meta.decoding.length_penalty_form == "average"  # transformers' |Y|^alpha
    if family.name == "bart":  # <s> text </s>, and <s> forced first as bart-large-cnn's forced_bos_token_id
        assert meta.task == "summarization" and meta.tokenizer.kind == "bpe"
        assert (meta.tokenizer.source_prefix, meta.tokenizer.target_prefix) == (("<s>",), ("<s>",))
    elif family.name == "pegasus":  # a summarizer, with the settings of its task_specific_params
        assert meta.task == "summarization"
        assert (meta.decoding.beam_size, meta.decoding.length_penalty) == (3, 0.8)
        assert (meta.decoding.max_len_b, meta.decoding.min_length) == (28, 1)
        assert not meta.tokenizer.languages
    else:
        assert meta.task == "translation" and family.source in meta.tokenizer.languages
        assert meta.tokenizer.source_language == "prefix" and meta.tokenizer.target_language == "forced"


# -- what the importer and the translator refuse -------------------------------------------------------


def copy_dir(family: Family, tmp_path: Path) -> Path:
    return Path(shutil.copytree(family.hf_dir, tmp_path / "hf"))


def edit_json(path: Path, **changes: Any) -> None:
    data = json.loads(path.read_text(encoding="utf-8"))
    path.write_text(json.dumps({**data, **changes}), encoding="utf-8")


def test_an_unknown_model_type_is_named(family: Family, tmp_path: Path) -> None:
    hf = copy_dir(family, tmp_path)
    edit_json(hf / "config.json", model_type="t5")
    with pytest.raises(CheckpointError, match=r"config\.json: model_type 't5' is not one we import"):
        import_model(hf, tmp_path / "out")


@pytest.mark.parametrize("damage", ["missing", "misshapen"])
def test_missing_or_misshapen_tensors_are_named(family: Family, tmp_path: Path, damage: str) -> None:
    hf = copy_dir(family, tmp_path)
    tensors = load_file(str(hf / "model.safetensors"))
    name = "model.decoder.layers.1.fc1.weight"
    if damage == "missing":
        del tensors[name]
    else:
        tensors[name] = tensors[name][:, :-1].contiguous()
    save_file(tensors, str(hf / "model.safetensors"))
    with pytest.raises(CheckpointError, match="model.safetensors") as e:
        import_model(hf, tmp_path / "out", task="translation")
    assert ("fc1" in str(e.value) or "ffn.w1" in str(e.value)) and "\n" not in str(e.value)
    assert not (tmp_path / "out" / "config.json").exists()


def shard(family: Family, tmp_path: Path) -> Path:
    """A copy of the family's directory with its weights in shards, as save_pretrained leaves a model over its
    max_shard_size (NLLB-3.3B's, in three)."""
    hf = copy_dir(family, tmp_path)
    (hf / "model.safetensors").unlink()
    family.model.save_pretrained(str(hf), max_shard_size="200KB")
    return hf


def test_sharded_weights_import_as_the_one_file_does(family: Family, imported: Path, tmp_path: Path) -> None:
    hf = shard(family, tmp_path)
    shards = set(json.loads((hf / INDEX_FILE).read_text(encoding="utf-8"))["weight_map"].values())
    assert len(shards) > 2 and not (hf / "model.safetensors").exists()
    out = import_model(hf, tmp_path / "out", task=read_meta(imported).task)
    got, want = load_file(str(out / "model.safetensors")), load_file(str(imported / "model.safetensors"))
    assert got.keys() == want.keys() and all(torch.equal(got[k], want[k]) for k in want)


def damage_shards(hf: Path, damage: str) -> tuple[Path, str]:
    """The damage done to a sharded directory, the file the error must name and what it must say."""
    index = hf / INDEX_FILE
    data = json.loads(index.read_text(encoding="utf-8"))
    weight_map: dict[str, str] = data["weight_map"]
    name = "model.decoder.layers.1.fc1.weight"
    if damage == "missing shard":
        (hf / weight_map[name]).unlink()
        return hf / weight_map[name], "shard is missing"
    if damage == "misplaced tensor":
        weight_map[name] = next(f for f in sorted(set(weight_map.values())) if f != weight_map[name])
        index.write_text(json.dumps(data), encoding="utf-8")
        return hf / weight_map[name], f"has no tensor {name}"
    if damage == "shard outside the directory":
        weight_map[name] = "../model.safetensors"
        index.write_text(json.dumps(data), encoding="utf-8")
        return index, "is not a shard file's name beside the index"
    if damage == "truncated shard":
        shard_file = hf / weight_map[name]
        shard_file.write_bytes(shard_file.read_bytes()[:100])
        return shard_file, "not a valid safetensors file"
    index.write_text('{"weight_map": ', encoding="utf-8")
    return index, "not valid JSON"


@pytest.mark.parametrize(
    "damage", ["missing shard", "misplaced tensor", "shard outside the directory", "truncated shard", "bad index"]
)
def test_a_damaged_sharded_checkpoint_is_named(family: Family, tmp_path: Path, damage: str) -> None:
    hf = shard(family, tmp_path)
    path, says = damage_shards(hf, damage)
    with pytest.raises(CheckpointError) as e:
        import_model(hf, tmp_path / "out", task="translation")
    assert str(path) in str(e.value) and says in str(e.value) and "\n" not in str(e.value), str(e.value)
    assert not (tmp_path / "out" / "config.json").exists()


def test_a_tokenizer_of_another_model_is_refused(family: Family, tmp_path: Path) -> None:
    hf = copy_dir(family, tmp_path)
    edit_json(hf / "config.json", vocab_size=100)  # fewer embeddings than the tokenizer has ids
    tensors = load_file(str(hf / "model.safetensors"))
    save_file(
        {k: v[:100].contiguous() if v.dim() and v.size(0) > 100 else v for k, v in tensors.items()},
        str(hf / "model.safetensors"),
    )
    with pytest.raises(
        CheckpointError, match=r"\.(model|json): the tokenizer gives ids up to \d+, but the model has 100"
    ):
        import_model(hf, tmp_path / "out", task="translation")


def test_an_unknown_language_is_named(translator: Translator, family: Family, imported: Path) -> None:
    if not translator.tokenizer.multilingual:  # one pair: nothing to choose
        assert translator.translate(["kalo"], target_lang="xx") == translator.translate(["kalo"])
        return
    with pytest.raises(UnknownLanguageError, match="unknown target language 'xx_YY'; the model knows: "):
        translator.translate(["kalo"], source_lang=family.source, target_lang="xx_YY")
    with pytest.raises(UnknownLanguageError, match="this model needs a source language"):
        translator.translate(["kalo"], target_lang=family.target)
    with pytest.raises(ConfigError, match="unknown language 'xx'"):
        import_model(family.hf_dir, imported.parent / "other", source_lang="xx")


def test_the_import_and_translate_commands(
    family: Family, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "ours"
    task = ["--task", "summarization"] if family.name in ("pegasus", "bart") else []
    langs = ["--source-lang", family.source, "--target-lang", family.target] if family.source and family.target else []
    assert main(["import", str(family.hf_dir), str(out), *task, *langs]) == 0
    texts = make_sentences(3, seed=4)
    monkeypatch.setattr("sys.stdin", __import__("io").StringIO("\n".join(texts) + "\n"))
    capsys.readouterr()
    assert main(["translate", "--model", str(out), "--beam-size", "2"]) == 0
    printed = capsys.readouterr().out.splitlines()
    want = Translator.load(out, device="cpu").translate(texts, beam_size=2)
    assert printed == [o.text for o in want]
    if family.source:
        assert main(["translate", "--model", str(out), "--target-lang", "zz"]) == 2
        assert "unknown target language 'zz'" in capsys.readouterr().err


def test_the_service_translates_between_a_multilingual_models_languages(
    family: Family, imported: Path, translator: Translator, tmp_path: Path
) -> None:
    """POST /translate naming the model and its codes: the worker forces the target; a code the model does not
    know is the request's error (422), never the worker's."""
    from tests.service.test_api import ready_client

    models = tmp_path / "models"
    models.mkdir()
    shutil.copytree(imported, models / family.name)
    client = ready_client(models)
    try:
        texts = make_sentences(3, seed=9)
        if read_meta(imported).task == "summarization":  # served on /summarize
            r = client.post("/summarize", json={"q": texts, "model": family.name})
            assert r.status_code == 200 and len(r.json()["summaries"]) == 3, r.text
            return
        body = {"q": texts, "model": family.name, "source": family.source, "target": family.target, "beam_size": 4}
        r = client.post("/translate", json=body)
        assert r.status_code == 200, r.text
        want = translator.translate(texts, beam_size=4, source_lang=family.source, target_lang=family.target)
        assert r.json()["translatedText"] == [o.text for o in want]
        if translator.tokenizer.multilingual:
            r = client.post("/translate", json={**body, "target": "xx_YY"})
            assert r.status_code == 422 and "unknown target language 'xx_YY'" in r.text, r.text
    finally:
        client.__exit__(None, None, None)


def test_int8_n_best_and_attention_maps_work_for_every_family(
    imported: Path, translator: Translator, family: Family, texts: list[str]
) -> None:
    """int8 weights decode close to float32; n-best lists and attention maps leave the language ids out."""
    pair = {"source_lang": family.source, "target_lang": family.target}
    int8 = Translator.load(imported, device="cpu", dtype="int8")
    best = [o.text for o in translator.translate(texts[:40], beam_size=4, **pair)]
    best8 = [o.text for o in int8.translate(texts[:40], beam_size=4, **pair)]
    assert sum(a == b for a, b in zip(best, best8, strict=True)) >= 24  # quantized: not equal everywhere
    [out] = translator.translate(texts[:1], beam_size=4, n_best=3, return_attention=True, **pair)
    assert len(out.hypotheses) == 3 and len({tuple(h.ids) for h in out.hypotheses}) == 3
    maps = out.hypotheses[0].attention
    assert maps is not None
    languages = translator.languages(family.source, family.target)
    source_ids = translator.encode(texts[:1], languages=languages)[0]
    S, T = len(source_ids), len(out.hypotheses[0].tokens) + 1  # the source's language id in, the forced out
    assert maps.cross.shape[-2:] == (T, S) and maps.encoder.shape[-2:] == (S, S) and maps.decoder.shape[-2:] == (T, T)
    assert maps.source_tokens == translator.tokenizer.target_pieces(source_ids)
    torch.testing.assert_close(maps.cross.sum(-1), torch.ones(maps.cross.shape[:-1]), atol=1e-4, rtol=0)


def test_a_paragraph_is_cut_by_the_rules_of_its_source_language(
    family: Family, imported: Path, translator: Translator, tmp_path: Path
) -> None:
    """Sentence rules go by ISO 639-1 codes: a multilingual model's own codes ("eng_Latn") are mapped to them,
    also where they are the checkpoint's defaults; a paragraph is then translated sentence by sentence."""
    paragraph = "Kalo mine ruza. Vo kalo mine? Ruza vo kalo!"
    if not translator.tokenizer.multilingual:
        assert len(translator.segment([paragraph])[0].spans) == (1 if read_meta(imported).task != "translation" else 3)
        return
    assert len(translator.segment([paragraph], family.source)[0].spans) == 3
    defaults = import_model(family.hf_dir, tmp_path / "defaults", source_lang=family.source, target_lang=family.target)
    by_default = Translator.load(defaults, device="cpu")
    assert len(by_default.segment([paragraph])[0].spans) == 3
    [out] = by_default.translate([paragraph], beam_size=2)
    assert len(out.hypotheses[0].sentences) == 3
