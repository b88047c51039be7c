"""model.beam.Admission: which waiting sources join running searches (the budget, padding counted), and when
(a few at a time), the one rule of Translator.translate and the service's worker."""

from __future__ import annotations

from model.beam import Admission


def test_sources_fit_within_the_sentences_and_the_padded_tokens_of_all_searches() -> None:
    admission = Admission(max_sentences=4, max_tokens=30, together=1, wait_steps=None)
    held: dict[str, tuple[int, int]] = {"a": (1, 10), "b": (0, 0)}
    assert admission.fits(held, "a", 5)  # a: 2 x 10 = 20 tokens
    assert held["a"] == (2, 10)
    assert not admission.fits(held, "b", 11)  # 20 + 1 x 11 > 30
    assert admission.fits(held, "b", 10) and held["b"] == (1, 10)  # 20 + 10 = 30
    assert not admission.fits(held, "a", 1)  # a would pad 3 x 10 = 30 beside b's 10
    held = {"a": (3, 1)}
    assert admission.fits(held, "a", 1) and not admission.fits(held, "a", 1)  # 4 sentences at most
    assert Admission(4, 5, 1, None).fits({}, "a", 50)  # an empty search takes any one source


def test_offline_sources_join_once_a_quarter_is_free_or_all_that_is_left_fit() -> None:
    admission = Admission(max_sentences=32, max_tokens=8192, together=8, wait_steps=None)
    assert admission.due(running=0, waiting=100)
    assert not admission.due(running=0, waiting=0)
    assert not admission.due(running=25, waiting=100) and admission.due(running=24, waiting=100)
    assert admission.due(running=29, waiting=3) and not admission.due(running=30, waiting=3)


def test_arriving_sources_wait_a_few_steps_for_company_under_load() -> None:
    admission = Admission(max_sentences=16, max_tokens=8192, together=2, wait_steps=3)
    assert admission.due(running=0, waiting=1)  # an idle search takes one at once
    assert admission.due(running=14, waiting=5)  # two rows free, two or more waiting: together
    for _ in range(3):
        assert not admission.due(running=15, waiting=5)  # one row free: wait for another
    assert admission.due(running=15, waiting=5)  # but not for long
    for _ in range(3):
        assert not admission.due(running=15, waiting=0)  # steps with nobody waiting count too
    assert admission.due(running=15, waiting=1)  # so a lone arrival after them joins at once
