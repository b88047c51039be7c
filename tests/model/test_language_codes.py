"""model.language_codes: the codes users name a multilingual model's languages by."""

from __future__ import annotations

import pytest

from model.language_codes import M2M100, NLLB, matching, public_codes

NLLB_CODES = [*public_codes(list(NLLB)).values(), *NLLB]


@pytest.mark.parametrize(
    ("code", "known", "want"),
    [
        ("de", NLLB_CODES, "de"),
        ("DE", NLLB_CODES, "de"),
        ("Deu_latn", NLLB_CODES, "deu_Latn"),
        ("de-AT", NLLB_CODES, "de"),
        ("pt_BR", NLLB_CODES, "pt"),
        ("iw", NLLB_CODES, "he"),  # the withdrawn code for Hebrew
        ("zh", NLLB_CODES, "zh"),  # zho_Hans's
        ("zh-CN", NLLB_CODES, "zh"),
        ("zh-TW", NLLB_CODES, "zho_Hant"),
        ("zh-Hant-HK", NLLB_CODES, "zho_Hant"),
        ("zh-TW", list(M2M100), None),  # M2M100 has one Chinese, by its likely script Hans
        ("sr-Latn", NLLB_CODES, None),  # NLLB's Serbian is Cyrillic
        ("xx", NLLB_CODES, None),
        ("not a tag!", NLLB_CODES, None),
        ("", NLLB_CODES, None),
        ("en-US", ["en"], "en"),
        ("EN", ["en"], "en"),
        ("en-US", ["de"], None),
    ],
)
def test_a_users_code_names_a_known_code_of_its_language_and_script(
    code: str, known: list[str], want: str | None
) -> None:
    assert matching(code, known) == want
