"""The pieces the hardening rests on, alone: the JSON value bound, costs, token buckets, Host names."""

from __future__ import annotations

import json

import pytest

from model.config import DecodingConfig, ModelConfig
from service.api.access import host_name
from service.api.jsonscan import too_many_values
from service.api.text import decode_cost
from service.attention import AttentionSelection
from service.queue.memory import Bucket


def values(text: str) -> int:
    """The smallest limit too_many_values accepts the text under."""
    return next(n for n in range(10_000) if not too_many_values(text.encode(), n))


@pytest.mark.parametrize(
    ("text", "expected"),
    [  # the larger of: strings; commas, brackets, braces
        ('{"q": "a"}', 2),  # two strings
        ('{"q": ["a", "b", "c"]}', 4),  # four strings; brace, bracket, two commas
        ('{"q": "a, [b], {c}"}', 2),  # separators inside a string do not count
        ('{"q": "say \\"x, y\\"", "n": [1, 2]}', 4),  # nor behind escaped quotes
        ('{"q": "a\\\\", "n": [1, 2]}', 4),  # an escaped backslash ends the string
        ('{"q": "a\\\\\\"[,,,]"}', 2),  # a backslash, then an escaped quote
        ("[" + ",".join(["1"] * 500) + "]", 500),
        ('["' + '","'.join(["x"] * 300) + '"]', 300),
    ],
)
def test_json_values_are_counted_outside_strings(text: str, expected: int) -> None:
    json.loads(text)  # valid JSON
    assert values(text) == expected


def test_many_strings_are_too_many_values_whatever_their_commas() -> None:
    body = json.dumps(["a"] * 2000).encode()
    assert too_many_values(body, 1500) and not too_many_values(body, 2100)


def test_decode_cost_and_attention_cells() -> None:
    options = DecodingConfig(beam_size=4, max_len_a=1.0, max_len_b=50)
    assert decode_cost([10, 20], options, model_max_len=1024) == 4 * 60 * 70 + 4 * 70 * 90
    assert decode_cost([10], DecodingConfig(beam_size=2, max_len_a=0, max_len_b=500), model_max_len=64) == 2 * 63 * 73
    model = ModelConfig.from_preset("tiny", 100)  # N 2, h 4
    every = AttentionSelection().cells(10, 5, model)
    assert every == 2 * 4 * (6 * 10 + 10 * 10 + 6 * 6)
    narrow = AttentionSelection(kinds=("cross",), layers=(1,), heads=(0, 3))
    assert narrow.cells(10, 5, model) == 1 * 2 * 6 * 10


def test_token_bucket_refills_at_its_rate() -> None:
    bucket, wait = None, 0.0
    for _ in range(3):
        bucket, wait = Bucket.take(bucket, 3, now=100.0, take=True)
        assert wait == 0.0
    bucket, wait = Bucket.take(bucket, 3, now=100.0, take=True)
    assert wait == pytest.approx(20.0)  # 3 a minute: one every 20 s
    bucket, wait = Bucket.take(bucket, 3, now=110.0, take=False)
    assert wait == pytest.approx(10.0)
    bucket, wait = Bucket.take(bucket, 3, now=120.0, take=True)
    assert wait == 0.0 and bucket.tokens == pytest.approx(0.0)


@pytest.mark.parametrize(
    ("host", "name"),
    [
        ("example.org", "example.org"),
        ("Example.ORG:8000", "example.org"),
        ("[::1]:8000", "::1"),
        ("::1", "::1"),
        ("", ""),
    ],
)
def test_host_names(host: str, name: str) -> None:
    assert host_name(host) == name
