"""What the API checks without the weights (service.registry): the bounds of ASCII texts' lengths that spare it
tokenizing them, against the lengths themselves, and the cost check that uses them."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.api.text import decode_cost
from service.errors import ModelNotFound
from service.registry import Registry
from tests.service.test_api import assert_error, ready_client

ASCII = [  # each shorter than the test model's 64 tokens, with room for the bound's extra
    "a",
    ".",
    "!!!???...",
    "   x   ",
    "File not found. Try again!",
    "--field=FIELDS (default=1); see FIELDS",
    "See http://example.org/a?b=1, me@x.org, 10:30.",
    "zzzzqqqqxxxxjjjj",
    "`code span` and\ttabs\nand new lines",
    "\x07 control \x1b characters",
]


@pytest.fixture(scope="module")
def registry(models_dir: Path) -> Registry:
    return Registry.scan(models_dir)


@pytest.mark.parametrize("text", ASCII)
def test_ascii_bounds_are_at_least_the_lengths(registry: Registry, text: str) -> None:
    bounds = registry.length_bounds("tiny-en-de", [text])
    lengths = registry.lengths("tiny-en-de", [text], truncate=False)
    assert bounds is not None and len(bounds) == len(lengths)
    assert all(b >= n for b, n in zip(bounds, lengths, strict=True)), (bounds, lengths)


def test_no_bounds_where_only_the_tokenizer_can_tell(registry: Registry) -> None:
    assert registry.length_bounds("tiny-en-de", ["ok", "Grüße aus Köln"]) is None  # not ASCII: NFKC may expand
    long = "word " * 20  # 100 characters: a bound past the model's 64 tokens, though its tokens may be fewer
    assert registry.length_bounds("tiny-en-de", [long]) is None


def test_cost_check_decides_as_the_exact_lengths(models_dir: Path, registry: Registry) -> None:
    """A request whose bound is over the limit but whose real cost is not is taken; one token over is refused."""
    text = "The file could not be found. Please try again later."
    options = registry.get("tiny-en-de").meta.decoding
    exact = decode_cost(registry.lengths("tiny-en-de", [text], truncate=False), options, 64)
    bounds = registry.length_bounds("tiny-en-de", [text])
    assert bounds is not None and decode_cost(bounds, options, 64) > exact
    body = {"q": text, "model": "tiny-en-de"}
    for limit, status in ((exact, 200), (exact - 1, 413)):
        client = ready_client(models_dir, max_request_cost=limit)
        try:
            r = client.post("/translate", json=body)
            if status == 200:
                assert r.status_code == 200, r.text
            else:
                assert_error(r, 413, "too_costly", "TRANSFORMER_MAX_REQUEST_COST", f"{exact:,}")
        finally:
            client.__exit__(None, None, None)


def test_no_model_of_a_task_names_the_task(models_dir: Path, tmp_path: Path) -> None:
    """With only a translation model, /summarize answered "no summarization model; available models: none"."""
    (tmp_path / "tiny-en-de").symlink_to(models_dir / "tiny-en-de")
    with pytest.raises(ModelNotFound, match=r"^no summarization model; available summarization models: none$"):
        Registry.scan(tmp_path).resolve("summarization", None, None, None)
    with pytest.raises(ModelNotFound, match=r"^no translation model from en to fr; available translation models: tiny"):
        Registry.scan(tmp_path).resolve("translation", None, "en", "fr")
