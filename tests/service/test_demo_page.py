"""The browser demo at / in real headless Chromium against the real server: translations equal the API's,
decoding options left empty are the model's own, the heatmap has a cell per token pair and highlights on hover,
exports work, model text stays text, and the page loads nothing from outside the service."""

from __future__ import annotations

import json
import shutil
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import sentencepiece as spm
from playwright.sync_api import Browser, Page, Route, expect, sync_playwright

from service.settings import ServiceSettings
from tests.conftest import SPM_VOCAB, save_random_checkpoint
from tests.model.test_decoding_defaults import with_decoding
from tests.service.conftest import Server

CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts"
TEXT = "kalo mine ruza vo"
XSS = "<img src=x onerror=alert(1)>"
LONG = "kalo mine ruza " * 40  # more than tiny-en-de's 64 tokens
OPTIONS = {"beam_size": 3, "n_best": 2, "max_length": 6}  # random weights decode to the length limit
DARKEST = (8, 48, 107)  # the top of the Blues scale


@dataclass
class Session:
    """One page on the server, with everything it asked for and every dialog and script error it raised."""

    server: Server
    page: Page
    requests: list[str] = field(default_factory=list)
    dialogs: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    console_errors: list[str] = field(default_factory=list)

    def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        r = httpx.post(f"{self.server.url}{path}", json=body, timeout=60)
        assert r.status_code == 200, r.text
        return dict(r.json())


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not CHROMIUM.is_file():
        pytest.fail(
            f"{CHROMIUM} is missing: the demo page tests need Debian's Chromium; "
            "install it with `apt-get install -y chromium`"
        )
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM))
        yield b
        b.close()


@pytest.fixture
def session(browser: Browser, serve: Callable[..., Server]) -> Iterator[Session]:
    server = serve()
    context = browser.new_context(viewport={"width": 1280, "height": 900}, accept_downloads=True)
    page = context.new_page()
    page.set_default_timeout(30_000)
    s = Session(server, page)
    page.on("request", lambda r: s.requests.append(r.url))
    page.on("dialog", lambda d: (s.dialogs.append(d.message), d.dismiss()))
    page.on("pageerror", lambda e: s.errors.append(str(e)))
    page.on("console", lambda m: s.console_errors.append(m.text) if m.type == "error" else None)
    page.goto(f"{server.url}/")
    yield s
    context.close()


def run_in_page(page: Page, text: str, model: str = "tiny-en-de", **options: Any) -> None:
    """Pick the model, type the text, set the options, press the button; waits for the output."""
    page.get_by_test_id("model-select").select_option(model)
    page.get_by_test_id("input").fill(text)
    if not page.locator("#options").evaluate("e => e.open"):
        page.locator("#options summary").click()
    for name, testid in (("beam_size", "beam-size"), ("n_best", "n-best"), ("max_length", "max-length")):
        page.get_by_test_id(testid).fill(str(options.get(name, OPTIONS[name])))
    page.get_by_test_id("run").click()


def wait_done(page: Page) -> None:
    expect(page.get_by_test_id("output")).to_have_attribute("data-status", "done")
    expect(page.get_by_test_id("attention")).to_have_attribute("data-status", "done")


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    return int(width), int(height)


def pixel(page: Page, x: float, y: float) -> tuple[int, int, int]:
    rgb = page.evaluate(
        "([x, y]) => Array.from(document.querySelector('#heatmap-canvas').getContext('2d')"
        ".getImageData(x, y, 1, 1).data.slice(0, 3))",
        [x, y],
    )
    return (int(rgb[0]), int(rgb[1]), int(rgb[2]))


def heatmap_shape(page: Page) -> tuple[int, int]:
    heatmap = page.get_by_test_id("heatmap")
    return int(heatmap.get_attribute("data-rows") or -1), int(heatmap.get_attribute("data-cols") or -1)


def shown(tokens: list[str]) -> list[str]:
    """Pieces as the page shows them: no ▁ before a word's first piece, a · before the pieces that continue it."""
    return [
        t if t.startswith("<") or t == "(start)" else t[1:] or "\u2423" if t.startswith("\u2581") else "\u00b7" + t
        for t in tokens
    ]


def titles(page: Page, selector: str) -> list[str]:
    return [str(t) for t in page.locator(selector).evaluate_all("els => els.map(e => e.title)")]


def table_of(page: Page) -> tuple[list[str], list[str], list[list[str]]]:
    """The matrix shown, as the table view lists it: row labels, column labels and the weights' texts."""
    table = page.get_by_test_id("weights-table")
    cells = table.locator("tbody tr").evaluate_all(
        "trs => trs.map(tr => [...tr.cells].slice(1).map(c => c.textContent))"
    )
    return table.locator("tbody th").all_text_contents(), table.locator("thead th").all_text_contents()[1:], cells


def test_translate_attention_hover_and_exports(session: Session) -> None:
    page = session.page
    run_in_page(page, TEXT)
    wait_done(page)

    want = session.post("/translate", {"q": TEXT, "model": "tiny-en-de", **OPTIONS})
    best, alternative = want["translations"][0], want["translations"][0]["alternatives"][0]
    expect(page.get_by_test_id("best-text")).to_have_text(want["translatedText"])
    expect(page.get_by_test_id("echo")).to_have_text(TEXT)
    items = page.get_by_test_id("nbest-item")
    expect(items).to_have_count(2)
    assert items.locator(".text").all_text_contents() == [best["text"], alternative["text"]]
    scores = [float(s or "nan") for s in items.evaluate_all("els => els.map(e => e.dataset.score)")]
    assert scores == pytest.approx([best["score"], alternative["score"]], abs=1e-6)
    assert page.get_by_test_id("best-tokens").locator(".token").all_text_contents() == shown(best["tokens"])

    params = {m["id"]: m for m in httpx.get(f"{session.server.url}/models").json()["models"]}["tiny-en-de"]
    info = page.get_by_test_id("model-info")
    expect(info.locator("[data-param=N]")).to_have_text(f"N = {params['parameters']['N']}")
    expect(info.locator("[data-param=d_model]")).to_have_text(f"dmodel = {params['parameters']['d_model']}")
    expect(info.locator("[data-param=h]")).to_have_text(f"h = {params['parameters']['h']}")

    attention = session.post("/attention", {"q": TEXT, "model": "tiny-en-de", "beam_size": 3, "max_length": 6})
    S, T = len(attention["source_tokens"]), len(attention["target_tokens"])
    assert S >= 4 and T >= 3
    assert heatmap_shape(page) == (T, S)
    assert titles(page, "#heatmap .row-label") == shown(attention["target_tokens"])
    assert titles(page, "#heatmap .col-label") == shown(attention["source_tokens"])
    canvas = page.get_by_test_id("heatmap-canvas")
    box = canvas.bounding_box()
    assert box is not None
    cell = box["width"] / S
    assert box["height"] == pytest.approx(T * cell) and cell >= 14

    mean = np.array(attention["cross"][-1]).mean(axis=0)  # the default view: last layer, mean over heads
    r, c = np.unravel_index(mean.argmax(), mean.shape)
    assert pixel(page, (c + 0.5) * cell, (r + 0.5) * cell) == DARKEST  # colour scale tops at the largest weight

    row, col = 1, 2
    canvas.hover(position={"x": (col + 0.5) * cell, "y": (row + 0.5) * cell})
    heatmap = page.get_by_test_id("heatmap")
    expect(heatmap).to_have_attribute("data-hover-row", str(row))
    expect(heatmap).to_have_attribute("data-hover-col", str(col))
    assert page.locator("#heatmap .row-label.hl").evaluate_all("els => els.map(e => e.dataset.index)") == [str(row)]
    assert page.locator("#heatmap .col-label.hl").evaluate_all("els => els.map(e => e.dataset.index)") == [str(col)]
    expect(page.get_by_test_id("tooltip")).to_be_visible()
    assert float(page.get_by_test_id("tooltip-weight").inner_text()) == pytest.approx(mean[row, col], abs=2e-3)
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "demo-page.png"), full_page=True)
    page.get_by_test_id("row-labels").locator(".row-label").nth(0).hover()
    expect(heatmap).to_have_attribute("data-hover-row", "0")
    expect(heatmap).to_have_attribute("data-hover-col", "")

    thumbs = page.get_by_test_id("thumb")
    layers, heads = len(attention["cross"]), len(attention["cross"][0])
    expect(thumbs).to_have_count(layers * (heads + 1))  # every head and the mean, per layer
    page.locator("[data-testid=thumb][data-layer='0'][data-head='2']").click()
    expect(page.get_by_test_id("layer")).to_have_value("0")
    expect(page.get_by_test_id("head")).to_have_value("2")
    expect(page.get_by_test_id("caption")).to_contain_text("layer 0, head 2")
    expect(page.locator("[data-testid=thumb].selected")).to_have_attribute("data-head", "2")
    one = np.array(attention["cross"][0][2])
    r, c = np.unravel_index(one.argmax(), one.shape)
    assert pixel(page, (c + 0.5) * cell, (r + 0.5) * cell) == DARKEST

    page.get_by_test_id("kind-encoder").check()
    assert heatmap_shape(page) == (S, S)
    page.get_by_test_id("kind-decoder").check()
    assert heatmap_shape(page) == (T, T)
    assert titles(page, "#heatmap .col-label") == shown(["(start)", *attention["target_tokens"][:-1]])
    page.get_by_test_id("kind-cross").check()
    assert heatmap_shape(page) == (T, S)

    page.get_by_test_id("view-lines").check()
    lines = page.get_by_test_id("lines")
    expect(lines).to_be_visible()
    expect(page.get_by_test_id("heatmap")).to_be_hidden()
    expect(lines.locator("text.token")).to_have_count(S + T)
    opacities = [
        float(o) for o in lines.locator("line").evaluate_all("els => els.map(e => e.getAttribute('stroke-opacity'))")
    ]
    assert opacities and max(opacities) == 1.0 and all(0 < o <= 1 for o in opacities)
    page.get_by_test_id("view-matrix").check()

    with page.expect_download() as download:
        page.get_by_test_id("export-json").click()
    exported = json.loads(Path(download.value.path()).read_text())
    assert {k: exported[k] for k in ("model", "text", "source_tokens", "target_tokens")} == {
        k: attention[k] for k in ("model", "text", "source_tokens", "target_tokens")
    }
    np.testing.assert_allclose(np.array(exported["cross"]), np.array(attention["cross"]), atol=1.01e-3)
    with page.expect_download() as download:
        page.get_by_test_id("export-png").click()
    assert download.value.suggested_filename == "attention-tiny-en-de-cross-l0-h2.png"
    width, height = png_size(Path(download.value.path()).read_bytes())
    assert width > 2 * S * 16 and height > 2 * T * 16  # drawn at twice the size, with labels around

    origin = session.server.url + "/"
    assert session.requests and all(u.startswith((origin, "blob:" + origin)) for u in session.requests), (
        session.requests
    )
    assert not session.errors and not session.console_errors and not session.dialogs


def test_script_in_the_input_stays_text(session: Session) -> None:
    page = session.page
    run_in_page(page, XSS)
    wait_done(page)
    expect(page.get_by_test_id("echo")).to_have_text(XSS)
    assert page.get_by_test_id("input").input_value() == XSS
    attention = session.post("/attention", {"q": XSS, "model": "tiny-en-de", "beam_size": 3, "max_length": 6})
    labels = page.locator("#heatmap .col-label")
    assert labels.evaluate_all("els => els.map(e => e.title)") == shown(attention["source_tokens"])
    assert "<unk>" in attention["source_tokens"]  # markup-like model text, shown as it is
    assert "<unk>" in labels.all_text_contents()
    canvas = page.get_by_test_id("heatmap-canvas")
    box = canvas.bounding_box()
    assert box is not None
    col = attention["source_tokens"].index("<unk>")
    canvas.hover(position={"x": (col + 0.5) * box["width"] / len(attention["source_tokens"]), "y": 3})
    expect(page.get_by_test_id("tooltip")).to_contain_text("<unk>")
    page.get_by_test_id("view-lines").check()
    expect(page.get_by_test_id("lines").locator("text.token", has_text="<unk>").first).to_be_visible()
    for tag in ("img", "unk", "script"):
        assert page.locator(f"body {tag}").count() == 0, tag
    assert not session.dialogs and not session.errors


def test_loading_errors_and_long_inputs(session: Session) -> None:
    page = session.page
    held: list[Route] = []
    page.route("**/attention", lambda route: held.append(route))  # hold the answer to see the loading state
    run_in_page(page, TEXT)
    expect(page.get_by_test_id("run")).to_be_disabled()
    expect(page.get_by_test_id("status")).to_have_text("Translating…")
    expect(page.get_by_test_id("output")).to_have_attribute("data-status", "loading")
    assert len(held) == 1
    held[0].continue_()
    wait_done(page)
    expect(page.get_by_test_id("run")).to_be_enabled()
    expect(page.get_by_test_id("status")).to_have_text("")
    page.unroute("**/attention")

    page.get_by_test_id("input").fill(LONG)
    page.get_by_test_id("run").click()
    expect(page.get_by_test_id("output")).to_have_attribute("data-status", "error")
    r = httpx.post(f"{session.server.url}/translate", json={"q": LONG, "model": "tiny-en-de", **OPTIONS})
    assert r.status_code == 422
    expect(page.get_by_test_id("error")).to_be_visible()
    expect(page.get_by_test_id("error-message")).to_contain_text(r.json()["error"]["message"])
    expect(page.get_by_test_id("error-code")).to_have_text("invalid_request (422)")
    expect(page.get_by_test_id("run")).to_be_enabled()

    page.get_by_test_id("truncate").check()
    page.get_by_test_id("run").click()
    wait_done(page)
    expect(page.get_by_test_id("error")).to_be_hidden()
    limit = {m["id"]: m for m in httpx.get(f"{session.server.url}/models").json()["models"]}["tiny-en-de"]
    assert heatmap_shape(page)[1] == limit["max_length"]  # cut to the model's limit
    cell = page.get_by_test_id("heatmap").get_attribute("data-cell")
    assert int(cell or 0) >= 14  # cells stay readable; the heatmap scrolls inside its box instead
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    page.screenshot(path=str(ARTIFACTS / "demo-page-long.png"), full_page=True)

    page.get_by_test_id("beam-size").fill("2")
    page.get_by_test_id("n-best").fill("3")
    page.get_by_test_id("run").click()
    expect(page.get_by_test_id("error-message")).to_contain_text("n_best: 3 is more than beam_size (2)")
    assert not session.errors


def test_summarize(session: Session) -> None:
    page = session.page
    page.get_by_test_id("model-select").select_option("tiny-sum")
    expect(page.get_by_test_id("run")).to_have_text("Summarize")
    expect(page.get_by_test_id("model-info")).to_contain_text("summarization")
    run_in_page(page, TEXT, model="tiny-sum", n_best=1)
    wait_done(page)
    want = session.post("/summarize", {"q": TEXT, "model": "tiny-sum", **OPTIONS, "n_best": 1})
    expect(page.get_by_test_id("best-text")).to_have_text(want["summaries"][0]["text"])
    expect(page.get_by_test_id("nbest-item")).to_have_count(1)
    assert not session.errors and not session.dialogs


# A recipe's own decoding options (config.json's "decoding"), unlike the paper's in every option the page has.
OWN = {"beam_size": 3, "n_best": 2, "length_penalty": 1.5, "min_length": 4, "no_repeat_ngram_size": 2, "max_len_b": 7}
OPTION_INPUTS = ("beam-size", "n-best", "length-penalty", "max-length", "min-length", "no-repeat")


@pytest.fixture
def own_server(tmp_path: Path, models_dir: Path) -> Iterator[Server]:
    """tiny-en-de, and `own`: a copy whose checkpoint carries its own decoding options (OWN, max_len_a 0)."""
    models = tmp_path / "models"
    shutil.copytree(models_dir / "tiny-en-de", models / "tiny-en-de")
    with_decoding(models_dir / "tiny-en-de", models / "own", {**OWN, "max_len_a": 0.0})
    server = Server(ServiceSettings(models_dir=models)).__enter__()
    server.wait_ready()
    yield server
    server.__exit__()


def test_options_left_empty_are_not_sent_so_a_model_decodes_with_its_own(browser: Browser, own_server: Server) -> None:
    """The option inputs start empty, each with the chosen model's own value as its placeholder (GET /models'
    decoding); the page sends only what is filled in, so that the model's own options apply to the rest."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    bodies: list[Any] = []
    errors: list[str] = []
    page.on("request", lambda r: bodies.append(r.post_data_json) if r.method == "POST" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(f"{own_server.url}/")
    page.locator("#options summary").click()
    placeholders = "els => els.map(e => [e.value, e.placeholder])"
    inputs = page.locator(", ".join(f"[data-testid={i}]" for i in OPTION_INPUTS))
    page.get_by_test_id("model-select").select_option("tiny-en-de")
    paper = [["", "4"], ["", "1"], ["", "0.6"], ["", "auto: input + 50"], ["", "0"], ["", "0"]]
    assert inputs.evaluate_all(placeholders) == paper
    page.get_by_test_id("model-select").select_option("own")
    own = [["", "3"], ["", "2"], ["", "1.5"], ["", "auto: 7"], ["", "4"], ["", "2"]]
    assert inputs.evaluate_all(placeholders) == own
    page.get_by_test_id("input").fill(TEXT)
    page.get_by_test_id("run").click()
    wait_done(page)
    assert bodies == [{"q": TEXT, "model": "own"}]  # no option the user left empty
    want = httpx.post(f"{own_server.url}/translate", json={"q": TEXT, "model": "own"}).json()["translations"][0]
    expect(page.get_by_test_id("best-text")).to_have_text(want["text"])
    texts = page.get_by_test_id("nbest-item").locator(".text")
    expect(texts).to_have_text([want["text"], *(h["text"] for h in want["alternatives"])])  # OWN's n-best: 2
    assert len(want["tokens"]) <= OWN["max_len_b"]

    page.get_by_test_id("n-best").fill("1")
    page.get_by_test_id("run").click()
    wait_done(page)
    assert bodies[-1] == {"q": TEXT, "model": "own", "n_best": 1}
    expect(page.get_by_test_id("nbest-item")).to_have_count(1)
    assert "n_best=1" in page.url and "beam_size" not in page.url
    assert not errors
    context.close()


def test_the_attention_is_that_of_the_translation_shown_and_of_the_hypothesis_picked(session: Session) -> None:
    """With non-default options (length penalty 2, min length, no-repeat, n-best 4), the text, score and n-best
    list shown equal /translate's, and the heatmap is the attention of the hypothesis picked in the list."""
    page = session.page
    opts = {
        "beam_size": 4,
        "n_best": 4,
        "max_length": 7,
        "length_penalty": 2.0,
        "min_length": 3,
        "no_repeat_ngram_size": 2,
    }
    page.locator("#options summary").click()
    page.get_by_test_id("length-penalty").fill("2")
    page.get_by_test_id("min-length").fill("3")
    page.get_by_test_id("no-repeat").fill("2")
    run_in_page(page, TEXT, **opts)
    wait_done(page)
    want = session.post("/translate", {"q": TEXT, "model": "tiny-en-de", **opts})["translations"][0]
    nbest = [(want["text"], want["score"])] + [(h["text"], h["score"]) for h in want["alternatives"]]
    expect(page.get_by_test_id("best-text")).to_have_text(want["text"])
    items = page.get_by_test_id("nbest-item")
    expect(items).to_have_count(len(nbest))
    assert [float(items.nth(i).get_attribute("data-score") or "nan") for i in range(len(nbest))] == [
        score for _, score in nbest
    ]
    for index in (0, 2):
        if index:
            page.get_by_test_id("nbest-pick").nth(index).click()
            wait_done(page)
        expect(page.get_by_test_id("nbest-pick").nth(index)).to_have_attribute("aria-pressed", "true")
        text, score = nbest[index]
        expect(page.get_by_test_id("attention-of")).to_contain_text(f"“{text}” (score {score:.3f})")
        a = session.post("/attention", {"q": TEXT, "model": "tiny-en-de", "hypothesis": index, **opts})
        assert (a["text"], a["score"]) == (text, score)
        assert heatmap_shape(page) == (len(a["target_tokens"]), len(a["source_tokens"]))
        with page.expect_download() as download:
            page.get_by_test_id("export-json").click()
        shown = json.loads(Path(download.value.path()).read_text())
        assert [shown["hypothesis"], shown["cross"]] == [index, a["cross"]]
    page.screenshot(path=str(ARTIFACTS / "demo-page-hypothesis.png"), full_page=True)
    assert not session.errors and not session.console_errors


def test_a_failed_run_leaves_no_attention_of_another_output(session: Session) -> None:
    page = session.page
    run_in_page(page, TEXT)
    wait_done(page)
    assert heatmap_shape(page)[0] > 0

    page.get_by_test_id("input").fill(LONG)  # a 422: longer than the model takes
    page.get_by_test_id("run").click()
    expect(page.get_by_test_id("error-code")).to_have_text("invalid_request (422)")
    attention = page.get_by_test_id("attention")
    expect(attention).to_have_attribute("data-status", "error")
    expect(page.get_by_test_id("attention-of")).to_have_text("No attention: the last run failed.")
    assert heatmap_shape(page) == (-1, -1) and page.locator("#heatmap canvas").count() == 0
    assert page.locator("#thumbs button").count() == 0 and page.locator("#lines line").count() == 0
    expect(page.get_by_test_id("export-json")).to_be_disabled()
    assert page.evaluate(LOW_CONTRAST) == []  # error messages too
    page.screenshot(path=str(ARTIFACTS / "demo-page-failed-run.png"), full_page=True)

    page.get_by_test_id("input").fill(TEXT)
    page.get_by_test_id("run").click()
    wait_done(page)
    session.server.__exit__()  # the server stops
    page.get_by_test_id("run").click()
    expect(page.get_by_test_id("error-code")).to_contain_text("network")
    expect(attention).to_have_attribute("data-status", "error")
    assert page.locator("#heatmap canvas").count() == 0
    assert not session.errors


def words_of(tokens: list[str]) -> list[list[int]]:
    """The page's grouping of pieces into words: a word starts at a piece with ▁ and at each special token."""
    groups: list[list[int]] = []
    for i, token in enumerate(tokens):
        special = token.startswith("<") or token == "(start)"
        if not special and not token.startswith("\u2581") and groups and not tokens[groups[-1][0]].startswith("<"):
            groups[-1].append(i)
        else:
            groups.append([i])
    return groups


def test_tokens_read_as_words_and_words_mode_merges_pieces(session: Session) -> None:
    page = session.page
    text = "kalomineruza vo sati kalo"  # long words: several pieces each
    run_in_page(page, text, max_length=8)
    wait_done(page)
    a = session.post("/attention", {"q": text, "model": "tiny-en-de", **OPTIONS, "max_length": 8})
    assert any(not t.startswith("\u2581") and not t.startswith("<") for t in a["source_tokens"]), "no subwords"
    labels = page.locator(".row-label, .col-label, #best-tokens .token").all_text_contents()
    page.get_by_test_id("view-lines").check()
    labels += page.locator("#lines text").all_text_contents()
    page.get_by_test_id("view-matrix").check()
    assert labels and not [t for t in labels if "\u2581" in t]
    assert "· marks a piece" in (page.get_by_test_id("caption").text_content() or "")

    page.get_by_test_id("units-words").check()
    rows, cols = words_of(a["target_tokens"]), words_of(a["source_tokens"])
    assert heatmap_shape(page) == (len(rows), len(cols)) and len(cols) < len(a["source_tokens"])
    expect(page.get_by_test_id("caption")).to_contain_text("summed over its pieces")
    layer = len(a["cross"]) - 1  # the page opens the last layer, mean over heads
    pieces = np.mean(np.array(a["cross"][layer]), axis=0)  # (T, S)
    want = np.array([[pieces[r][:, c].sum(axis=1).mean() for c in cols] for r in rows])
    page.get_by_test_id("view-table").check()
    got = np.array(table_of(page)[2], dtype=float)
    page.get_by_test_id("view-matrix").check()
    np.testing.assert_allclose(got, want, atol=5.01e-4)  # as the table shows them: 3 decimals
    np.testing.assert_allclose(got.sum(axis=1), 1.0, atol=0.01)  # rows still sum to 1 (weights rounded)
    spelled = ["".join(a["source_tokens"][i] for i in c).replace("\u2581", "") for c in cols]
    assert page.locator(".col-label").all_text_contents() == spelled
    page.screenshot(path=str(ARTIFACTS / "demo-page-words.png"), full_page=True)
    assert not session.errors


@pytest.fixture(scope="module")
def long_server(tmp_path_factory: pytest.TempPathFactory, spm_dir: Path) -> Iterator[Server]:
    """A tiny model that takes 1024 tokens, and a server that answers attention maps that large."""
    models = tmp_path_factory.mktemp("long-models")
    save_random_checkpoint(
        models / "long-1024", spm_dir, SPM_VOCAB, seed=8, source_lang="en", target_lang="xl", max_len=1024
    )
    server = Server(ServiceSettings(models_dir=models, max_attention_cells=12_000_000)).__enter__()
    server.wait_ready()
    yield server
    server.__exit__()


def test_a_1024_token_input_on_a_2x_screen_stays_drawn_and_labelled(
    browser: Browser, long_server: Server, spm_dir: Path
) -> None:
    context = browser.new_context(viewport={"width": 1280, "height": 800}, device_scale_factor=2)
    page = context.new_page()
    page.set_default_timeout(120_000)
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(f"{long_server.url}/")
    words = ["kalo", "mine", "ruza", "vo"] * 400
    sp = spm.SentencePieceProcessor(model_file=str(spm_dir / "spm.model"))
    while len(sp.encode(" ".join(words))) > 1023:  # with EOS, at most 1024 tokens
        words.pop()
    text = " ".join(words)
    run_in_page(page, text, model="long-1024", beam_size=1, n_best=1, max_length=3)
    wait_done(page)
    page.get_by_test_id("kind-encoder").check()
    rows, cols = heatmap_shape(page)
    assert 1000 <= rows == cols <= 1024
    size = page.evaluate(
        "() => { const c = document.querySelector('#heatmap-canvas'); "
        "return [c.width, c.height, parseFloat(c.style.width)]; }"
    )
    assert size[2] == cols * 14  # CSS pixels: 14 px cells (about 14,300 px), at 2 device pixels each ...
    assert size[0] <= 16384 and size[0] * size[1] <= 1 << 26  # ... would be a 28,672-px canvas: refused
    alpha = page.evaluate(
        "() => document.querySelector('#heatmap-canvas').getContext('2d').getImageData(100, 100, 1, 1).data[3]"
    )
    assert alpha == 255, "the canvas is drawn"

    scroller = page.locator(".heatmap-scroll")
    scroller.evaluate("e => { e.scrollTop = e.scrollHeight; e.scrollLeft = e.scrollWidth; }")
    box = scroller.bounding_box()
    assert box is not None
    for selector in (".col-labels", ".row-labels", ".corner"):
        labels = page.locator(f"#heatmap {selector}").bounding_box()
        assert labels is not None
        assert labels["x"] < box["x"] + box["width"] and labels["x"] + labels["width"] > box["x"], selector
        assert labels["y"] < box["y"] + box["height"] and labels["y"] + labels["height"] > box["y"], selector
    first_row = page.locator("#heatmap .row-label").nth(rows - 1).bounding_box()  # the last row, in view
    assert first_row is not None and box["x"] <= first_row["x"] <= box["x"] + 200
    page.screenshot(path=str(ARTIFACTS / "demo-page-1024-scrolled.png"))

    page.get_by_test_id("zoom").select_option("fit")
    fit = page.evaluate("() => document.querySelector('#heatmap').getBoundingClientRect().width")
    assert fit <= box["width"]
    page.get_by_test_id("view-lines").check()
    lines = page.get_by_test_id("lines")
    assert int(lines.get_attribute("data-lines") or 0) == page.locator("#lines line").count() == 4000
    expect(page.get_by_test_id("lines-note")).to_contain_text("4000 strongest")
    assert not errors
    context.close()


# The contrast of every piece of visible text against the background it is drawn on (WCAG 2's formula); the
# background is the first opaque one among the element and its ancestors. Disabled controls are exempt.
LOW_CONTRAST = """() => {
  const lum = (rgb) => { const c = rgb.map((v) => { v /= 255; return v <= 0.03928 ? v / 12.92
    : ((v + 0.055) / 1.055) ** 2.4; }); return 0.2126 * c[0] + 0.7152 * c[1] + 0.0722 * c[2]; };
  const parse = (s) => s.match(/[\\d.]+/g).map(Number);
  const back = (e) => { for (; e; e = e.parentElement) { const style = getComputedStyle(e);
    const stops = style.backgroundImage.match(/rgba?\\([^)]*\\)/g);  // a gradient: each of its colours
    if (stops) return stops.map((c) => parse(c).slice(0, 3));
    const c = parse(style.backgroundColor);
    if (c.length < 4 || c[3] === 1) return [c.slice(0, 3)]; } return [[255, 255, 255]]; };
  const low = [];
  for (const e of document.querySelectorAll("body *")) {
    const own = [...e.childNodes].some((n) => n.nodeType === 3 && n.textContent.trim());
    const style = getComputedStyle(e);
    if (!own || !e.getClientRects().length || style.visibility === "hidden" || e.closest("[disabled]")
        || e.closest(".visually-hidden") || e.closest("canvas, svg")) continue;
    const a = lum(parse(style.color).slice(0, 3));
    const ratio = Math.min(...back(e).map((c) => { const b = lum(c);
      return (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05); }));
    if (ratio < 4.5) low.push(`${e.tagName}.${e.className} "${e.textContent.trim().slice(0, 30)}" ${ratio.toFixed(2)}`);
  }
  return low;
}"""


def test_phone_tap_pins_a_value_and_labels_stay_in_view(browser: Browser, serve: Callable[..., Server]) -> None:
    server = serve()
    context = browser.new_context(
        viewport={"width": 390, "height": 844}, device_scale_factor=3, is_mobile=True, has_touch=True
    )
    page = context.new_page()
    page.goto(f"{server.url}/")
    run_in_page(page, TEXT, max_length=8)
    wait_done(page)
    scroller = page.locator(".heatmap-scroll")
    scroller.evaluate("e => { e.scrollLeft = e.scrollWidth; }")
    box, labels = scroller.bounding_box(), page.locator("#heatmap .row-labels").bounding_box()
    assert box is not None and labels is not None and box["x"] <= labels["x"] < box["x"] + 20  # still at the left
    canvas = page.get_by_test_id("heatmap-canvas")
    cell = float(page.get_by_test_id("heatmap").get_attribute("data-cell") or 0)
    canvas.tap(position={"x": 2.5 * cell, "y": 1.5 * cell})  # row 1, column 2
    page.wait_for_timeout(600)
    tooltip = page.get_by_test_id("tooltip")
    expect(tooltip).to_be_visible()
    weight = page.get_by_test_id("tooltip-weight").inner_text()
    expect(page.get_by_test_id("cell-live")).to_contain_text(f": {weight}")
    page.get_by_test_id("view-table").check()
    assert table_of(page)[2][1][2] == weight
    page.get_by_test_id("view-lines").check()
    lines = page.get_by_test_id("lines").bounding_box()
    assert lines is not None and lines["width"] <= 390
    page.get_by_test_id("view-matrix").check()
    assert page.evaluate(LOW_CONTRAST) == []
    page.screenshot(path=str(ARTIFACTS / "demo-page-phone.png"), full_page=True)
    context.close()


def test_keyboard_reaches_cells_and_screen_readers_get_values_a_table_and_the_result(session: Session) -> None:
    page = session.page
    run_in_page(page, TEXT)
    wait_done(page)
    want = session.post("/translate", {"q": TEXT, "model": "tiny-en-de", **OPTIONS})
    expect(page.get_by_test_id("announce")).to_have_text(f"Translation: {want['translatedText']}")
    canvas = page.get_by_test_id("heatmap-canvas")
    canvas.focus()
    for key in ("ArrowDown", "ArrowDown", "ArrowRight"):  # the first arrow pins (0, 0), then moves
        page.keyboard.press(key)
    live = page.get_by_test_id("cell-live")
    expect(live).not_to_be_empty()
    said = live.text_content()
    assert page.get_by_test_id("heatmap").get_attribute("data-hover-row") == "1"
    page.keyboard.press("Escape")
    expect(live).to_have_text("")
    expect(page.get_by_test_id("tooltip")).to_be_hidden()

    page.get_by_test_id("view-table").check()
    expect(page.get_by_test_id("weights-table")).to_be_visible()
    rows, cols, weights = table_of(page)
    assert rows == titles(page, "#heatmap .row-label") and cols == titles(page, "#heatmap .col-label")
    assert said == f"{rows[1]} → {cols[1]}: {weights[1][1]}"
    a = session.post("/attention", {"q": TEXT, "model": "tiny-en-de", **OPTIONS})
    mean = np.array(a["cross"][-1]).mean(axis=0)  # the last layer, mean over heads
    np.testing.assert_allclose(np.array(weights, dtype=float), mean, atol=5.01e-4)
    low = page.evaluate(LOW_CONTRAST)
    assert low == [], "\n".join(low)
    page.screenshot(path=str(ARTIFACTS / "demo-page-table.png"), full_page=True)
    assert not session.errors


def test_masked_cells_are_drawn_as_masked_and_heads_can_share_one_scale(session: Session) -> None:
    page = session.page
    run_in_page(page, TEXT)
    wait_done(page)
    page.get_by_test_id("kind-decoder").check()
    cell = float(page.get_by_test_id("heatmap").get_attribute("data-cell") or 0)
    assert pixel(page, 1.5 * cell, 0.5 * cell) == (229, 231, 235)  # row 0 may not see position 1
    assert pixel(page, 0.5 * cell, 0.5 * cell) != (229, 231, 235)
    expect(page.locator("#legend-masked")).to_be_visible()
    page.get_by_test_id("view-table").check()
    first = page.get_by_test_id("weights-table").locator("tbody tr").first.locator("td").all_text_contents()
    assert first[0] != "masked" and set(first[1:]) == {"masked"}
    page.get_by_test_id("view-matrix").check()

    page.get_by_test_id("kind-cross").check()
    a = session.post("/attention", {"q": TEXT, "model": "tiny-en-de", **OPTIONS})
    every = max(w for layer in a["cross"] for head in layer for row in head for w in row)
    page.get_by_test_id("shared-scale").check()
    for head in ("0", "3", "mean"):
        page.get_by_test_id("head").select_option(head)
        expect(page.get_by_test_id("legend-max")).to_have_text(f"{every:.3f} (every head)")
    page.get_by_test_id("shared-scale").uncheck()
    page.get_by_test_id("head").select_option("3")
    own = max(w for row in a["cross"][-1][3] for w in row)
    expect(page.get_by_test_id("legend-max")).to_have_text(f"{own:.3f}")
    assert not session.errors


def test_the_lines_view_draws_every_head_in_its_own_colour(session: Session) -> None:
    page = session.page
    run_in_page(page, TEXT)
    wait_done(page)
    page.get_by_test_id("view-lines").check()
    single = page.locator("#lines line").count()
    page.get_by_test_id("every-head").check()
    heads = page.locator("#lines line").evaluate_all("ls => [...new Set(ls.map(l => l.dataset.head))]")
    colours = page.locator("#lines line").evaluate_all("ls => [...new Set(ls.map(l => getComputedStyle(l).stroke))]")
    assert sorted(heads) == ["0", "1", "2", "3"] and len(colours) == 4
    assert page.locator("#lines line").count() > single
    expect(page.get_by_test_id("head-key").locator(".head-key")).to_have_count(4)
    page.screenshot(path=str(ARTIFACTS / "demo-page-head-view.png"), full_page=True)
    assert not session.errors


def view_of(page: Page) -> list[str | None]:
    """The view the controls show: kind, layer, head, view and units."""
    checked = {n: page.locator(f"input[name={n}]:checked").get_attribute("value") for n in ("kind", "view", "units")}
    layer, head = page.get_by_test_id("layer").input_value(), page.get_by_test_id("head").input_value()
    return [checked["kind"], layer, head, checked["view"], checked["units"]]


def test_the_url_holds_the_view_and_examples_run(session: Session, browser: Browser) -> None:
    page = session.page
    page.get_by_test_id("example").first.click()  # an example fills the text and runs it
    wait_done(page)
    assert page.get_by_test_id("input").input_value() == "File not found."
    run_in_page(page, TEXT, beam_size=4, n_best=3, max_length=7)
    wait_done(page)
    page.get_by_test_id("kind-decoder").check()
    page.get_by_test_id("layer").select_option("0")
    page.get_by_test_id("head").select_option("2")
    page.get_by_test_id("units-words").check()
    page.get_by_test_id("view-table").check()
    url = page.url
    assert "#" in url and "text=" in url and "min_length" not in url  # only the options filled in

    other = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
    other.goto(url)
    wait_done(other)
    assert other.get_by_test_id("input").input_value() == TEXT
    assert [other.get_by_test_id(t).input_value() for t in ("beam-size", "n-best", "max-length")] == ["4", "3", "7"]
    expect(other.get_by_test_id("best-text")).to_have_text(page.get_by_test_id("best-text").text_content() or "")
    assert view_of(other) == view_of(page) == ["decoder", "0", "2", "table", "words"]
    expect(other.get_by_test_id("weights-table")).to_be_visible()
    assert other.url == url
    other.context.close()
    assert not session.errors


def test_a_paragraph_is_shown_sentence_by_sentence_with_each_ones_attention(session: Session) -> None:
    """A text of three sentences: the page shows each beside its output as the answer's spans place them, and a
    sentence's button draws that sentence's attention, /attention's for it."""
    page = session.page
    parts = ["Kalo mine ruza.", "Vo sa ke lo.", "Mine vo!"]
    text = " ".join(parts)
    run_in_page(page, text, beam_size=2, n_best=1)
    wait_done(page)
    rows = page.get_by_test_id("sentence-row")
    expect(rows).to_have_count(3)
    want = session.post("/translate", {"q": text, "model": "tiny-en-de", "beam_size": 2, "n_best": 1, "max_length": 6})
    out = want["translations"][0]
    for i, span in enumerate(out["sentences"]):
        cells = rows.nth(i).locator("td").all_text_contents()
        assert cells[1:3] == [parts[i], out["text"][span["output"][0] : span["output"][1]]]
    page.get_by_test_id("sentence-pick").nth(1).click()
    wait_done(page)
    expect(page.get_by_test_id("sentence-pick").nth(1)).to_have_attribute("aria-pressed", "true")
    body = {"q": text, "model": "tiny-en-de", "beam_size": 2, "n_best": 1, "max_length": 6, "sentence": 1}
    a = session.post("/attention", body)
    assert heatmap_shape(page) == (len(a["target_tokens"]), len(a["source_tokens"]))
    assert (
        a["source_tokens"][:-1]
        == session.post("/attention", {**body, "q": parts[1], "sentence": 0})["source_tokens"][:-1]
    )
    page.get_by_test_id("input").fill("Kalo mine ruza")
    page.get_by_test_id("run").click()
    wait_done(page)
    expect(page.get_by_test_id("sentences")).to_be_hidden()  # one sentence: no pairs
    assert not session.errors and not session.console_errors


def test_a_file_is_translated_as_a_job_with_progress_and_downloaded(session: Session, tmp_path: Path) -> None:
    """Document mode: a file chosen on the page runs as a batch job, its progress shown, and its translation is
    offered for download; the file that comes down is the service's translation of it, its lines kept."""
    page = session.page
    lines = ["Kalo mine ruza.", "", "Vo sa ke lo.", "Mine vo!"]
    (tmp_path / "notes.txt").write_text("\n".join(lines) + "\n")
    page.get_by_test_id("model-select").select_option("tiny-en-de")
    if not page.locator("#options").evaluate("e => e.open"):
        page.locator("#options summary").click()
    page.get_by_test_id("beam-size").fill("2")
    page.get_by_test_id("max-length").fill("6")
    page.get_by_test_id("file").set_input_files(str(tmp_path / "notes.txt"))
    page.get_by_test_id("run-file").click()
    link = page.get_by_test_id("file-download")
    expect(link).to_be_visible()
    expect(link).to_have_text("Download notes.txt")
    expect(page.get_by_test_id("file-status")).to_have_text("notes.txt: done")
    assert page.get_by_test_id("file-progress").evaluate("p => [p.value, p.max]") == [3, 3]
    with page.expect_download() as download:
        link.click()
    got = Path(download.value.path()).read_text()
    want = session.post("/translate", {"q": lines[0], "model": "tiny-en-de", "beam_size": 2, "max_length": 6})
    assert got.split("\n")[0] == want["translatedText"] and got.split("\n")[1] == "" and got.count("\n") == 4
    assert not session.errors and not session.console_errors


@pytest.fixture
def nllb_server(tmp_path: Path, models_dir: Path) -> Iterator[Server]:
    """tiny-en-de, and an imported NLLB model (tests/model/hf_families.py) with no default languages."""
    from model.families import import_model
    from tests.model.hf_families import build_family_dir

    models = tmp_path / "models"
    shutil.copytree(models_dir / "tiny-en-de", models / "tiny-en-de")
    import_model(build_family_dir("nllb", tmp_path / "nllb").hf_dir, models / "nllb")
    server = Server(ServiceSettings(models_dir=models)).__enter__()
    server.wait_ready()
    yield server
    server.__exit__()


def test_a_multilingual_model_offers_source_and_target_menus(browser: Browser, nllb_server: Server) -> None:
    """The menus list the model's languages (ISO 639-1 codes where they exist), start at English into German, and
    each run sends the pair chosen; a model of one pair hides them."""
    page = browser.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(f"{nllb_server.url}/")
    page.get_by_test_id("model-select").select_option("tiny-en-de")
    expect(page.get_by_test_id("pair")).to_be_hidden()
    page.get_by_test_id("model-select").select_option("nllb")
    expect(page.get_by_test_id("pair")).to_be_visible()
    expect(page.get_by_test_id("source-select")).to_have_value("en")
    expect(page.get_by_test_id("target-select")).to_have_value("de")
    assert page.get_by_test_id("target-select").locator("option").count() == 202
    expect(page.get_by_test_id("model-info")).to_contain_text("202 languages")
    for target in ("de", "fr"):
        page.get_by_test_id("target-select").select_option(target)
        run_in_page(page, TEXT, model="nllb", n_best=1)
        wait_done(page)
        r = httpx.post(
            f"{nllb_server.url}/translate",
            json={"q": TEXT, "model": "nllb", "source": "en", "target": target, **OPTIONS, "n_best": 1},
        )
        expect(page.get_by_test_id("best-text")).to_have_text(r.json()["translatedText"])
    rows = page.locator("#heatmap .row-labels").inner_text()
    assert "deu_Latn" not in rows and "fra_Latn" not in rows  # forced, not searched: no row of their own
    assert not errors
