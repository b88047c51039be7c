"use strict";
// The demo page: translate or summarize with one of the service's models, then look at its attention.
// Every text from the user or a model goes into the page through textContent, never as markup.

const $ = (selector) => document.querySelector(selector);
const SVG = "http://www.w3.org/2000/svg";
const START = "(start)"; // the decoder's first input, before any output token
const MAX_LABEL = 16; // characters of a token shown as an axis label
// Browsers refuse larger canvases (Chromium: 32767 px a side, 268 M pixels in all) and draw a broken-canvas icon;
// past these, the heatmap's backing store gets fewer pixels than the screen's, not an error.
const MAX_CANVAS_SIDE = 16384;
const MAX_CANVAS_PIXELS = 1 << 26;
const MAX_LINES = 4000; // the lines view draws at most this many, the strongest (SVG slows down past a few thousand)
const MAX_TABLE = 100; // the table view lists at most this many rows and columns
// The lines view's colours for the heads of a layer, when each head is drawn (bertviz's head view).
const HEAD_COLOURS = ["#1d4ed8", "#c2410c", "#15803d", "#7e22ce", "#b91c1c", "#0e7490", "#a16207", "#be185d"];
const MASKED = [229, 231, 235];
// Texts to try, by task (translation examples are English: shown for models from English or of no stated language).
const EXAMPLES = {
  translation: ["File not found.", "Could not save the file because the disk is full.",
    "Do you want to delete the selected items?"],
  summarization: ["Return the number of items in the queue. Items that a worker has taken but not yet "
    + "acknowledged are counted too, so that a queue is empty only when every item is done."],
};
// The page's state in the URL (after #), so that a view can be shared: field -> the input it fills.
const URL_FIELDS = {beam_size: "#beam-size", n_best: "#n-best", length_penalty: "#length-penalty",
  max_length: "#max-length", min_length: "#min-length", no_repeat: "#no-repeat"}; // a cell the decoder may not attend to (a later position): not a zero weight
const BLUES = [[247, 251, 255], [222, 235, 247], [198, 219, 239], [158, 202, 225], [107, 174, 214],
  [66, 146, 198], [33, 113, 181], [8, 81, 156], [8, 48, 107]]; // matplotlib's "Blues", as the CLI draws
const KIND_NAMES = {cross: "Encoder–decoder attention", encoder: "Encoder self-attention",
  decoder: "Decoder self-attention"};
const AXES = {cross: ["output tokens", "source tokens"], encoder: ["source tokens (queries)", "source tokens (keys)"],
  decoder: ["output tokens", "decoder inputs (keys)"]}; // plural: "Rows: output tokens (8)"

const state = {
  models: [],
  attention: null, // the POST /attention answer drawn, null when none is (or it would be out of date)
  request: null, // the body of the last run's POST /attention: picking a hypothesis asks again with it
  kind: "cross",
  layer: 0,
  head: "mean", // or a head index
  view: "matrix",
  units: "pieces", // or "words": subword pieces merged into the words they spell
  zoom: "auto", // "auto" (cells of 14-36 px), "fit" (the heatmap fits the box's width), or a cell size in px
  sharedScale: false, // one colour scale for every layer and head of a kind, so that they can be compared
  everyHead: false, // the lines view draws each head of the layer in its own colour
  matrix: null, // what the heatmap shows: {weights, rows, cols, max, title, rowAxis, colAxis}
  hover: {row: null, col: null},
  pinned: null, // {row, col}: the cell a tap, click or the arrow keys chose; its value stays shown
  restore: null, // the view a shared URL asked for, applied once its attention arrives
};

/** An error answered by the service, in its {"error": {code, message, details}} shape. */
class ApiError extends Error {
  constructor(code, message, details, status) {
    super(message);
    this.code = code;
    this.details = details;
    this.status = status;
  }
}

/** An element with attributes and, optionally, text (always as text). */
function el(tag, attrs = {}, text) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) node.setAttribute(name, String(value));
  if (text !== undefined) node.textContent = text;
  return node;
}

/** An SVG element with attributes and, optionally, text. */
function svgEl(tag, attrs = {}, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attrs)) node.setAttribute(name, String(value));
  if (text !== undefined) node.textContent = text;
  return node;
}

const WORD_START = "\u2581"; // SentencePiece's "▁": this piece starts a word
const CONTINUES = "\u00b7"; // shown before a piece that continues the word before it
const SPECIAL = /^(<[^>]*>|\(start\))$/; // </s>, <unk>, <pad>, the decoder's start symbol

/** A piece as people read it: no ▁ before a piece that starts a word, a · before one that continues one. */
function pieceLabel(token) {
  if (SPECIAL.test(token)) return token;
  if (token.startsWith(WORD_START)) return token.slice(1) || "\u2423"; // ␣: a piece that is only a space
  return CONTINUES + token;
}

/** Pieces grouped into words: {labels, groups}, each group the indices of one word's pieces, in order. A word
 * starts at a piece that starts with ▁ and at every special token, which stays a word of its own. */
function wordsOf(tokens) {
  const labels = [], groups = [];
  tokens.forEach((token, i) => {
    const special = SPECIAL.test(token);
    const continues = !special && !token.startsWith(WORD_START) && groups.length > 0
      && !SPECIAL.test(tokens[groups[groups.length - 1][0]]);
    if (continues) {
      groups[groups.length - 1].push(i);
      labels[labels.length - 1] += token;
    } else {
      groups.push([i]);
      labels.push(special ? token : token.replace(WORD_START, ""));
    }
  });
  return {labels: labels.map((label) => label || "\u2423"), groups}; // ␣: a word that is only a space
}

/** Weights between words: summed over the pieces of a key word (a row still sums to 1), averaged over the
 * pieces of a query word, as bertviz's and fairseq's alignment tools merge subwords. */
function mergeWords(weights, rowGroups, colGroups) {
  return rowGroups.map((rg) => colGroups.map((cg) =>
    rg.reduce((sum, r) => sum + cg.reduce((s, c) => s + weights[r][c], 0), 0) / rg.length));
}

/** A token cut to MAX_LABEL characters for a label. */
function short(token) {
  return token.length <= MAX_LABEL ? token : token.slice(0, MAX_LABEL - 1) + "…";
}

/** The colour of t in [0, 1] on the Blues scale, as [r, g, b]. */
function colour(t) {
  const x = Math.min(1, Math.max(0, t)) * (BLUES.length - 1);
  const i = Math.min(BLUES.length - 2, Math.floor(x));
  const f = x - i;
  return BLUES[i].map((c, k) => Math.round(c + f * (BLUES[i + 1][k] - c)));
}

function css([r, g, b]) {
  return `rgb(${r}, ${g}, ${b})`;
}

// -- the API --------------------------------------------------------------------------------------

/** GET (no body) or POST JSON to the service; throws ApiError with the service's message. */
async function api(path, body) {
  const headers = {Accept: "application/json"};
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const key = $("#api-key").value.trim();
  if (key) headers.Authorization = `Bearer ${key}`;
  let response;
  try {
    response = await fetch(path, {method: body === undefined ? "GET" : "POST", headers,
      body: body === undefined ? undefined : JSON.stringify(body)});
  } catch (e) {
    throw new ApiError("network", `could not reach the service (${e.message})`, null, 0);
  }
  let data = null;
  try {
    data = await response.json();
  } catch {
    data = null;
  }
  if (!response.ok) {
    const err = data && data.error;
    if (err) throw new ApiError(err.code, err.message, err.details, response.status);
    throw new ApiError(`http_${response.status}`, `the service answered ${response.status}`, null, response.status);
  }
  return data;
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** GET /models, waiting while the service is still loading them. */
async function loadModels() {
  for (let attempt = 0; ; attempt++) {
    try {
      return await api("models");
    } catch (e) {
      if (e.status !== 503 || attempt >= 120) throw e;
      setStatus(`Waiting for the service: ${e.message}`, true);
      await sleep(1000);
    }
  }
}

// -- status and errors ----------------------------------------------------------------------------

function setStatus(text, busy = false) {
  const status = $("#status");
  status.textContent = text;
  status.classList.toggle("busy", busy);
}

function showError(error) {
  $("#error-code").textContent = error.code ? `${error.code}${error.status ? ` (${error.status})` : ""}` : "";
  let message = error.message || String(error);
  if (error.code === "invalid_request" && /truncate/.test(message)) {
    message += ". Or tick “cut inputs over the model's limit” in the decoding options.";
  }
  $("#error-message").textContent = message;
  $("#error").hidden = false;
}

function clearError() {
  $("#error").hidden = true;
  $("#error-code").textContent = "";
  $("#error-message").textContent = "";
}

function setBusy(busy, text = "") {
  for (const id of ["#run", "#model"]) $(id).disabled = busy || state.models.length === 0;
  document.body.setAttribute("aria-busy", String(busy));
  setStatus(text, busy);
}

// -- models ---------------------------------------------------------------------------------------

function currentModel() {
  return state.models.find((m) => m.id === $("#model").value) || null;
}

/** A chip with the paper's name of a hyperparameter and its value. */
function paramChip(name, sub, value) {
  const chip = el("span", {class: "chip", "data-param": sub ? `${name}_${sub}` : name});
  const key = el("var", {}, name);
  if (sub) key.append(el("sub", {}, sub));
  chip.append(key, ` = ${value}`);
  return chip;
}

function showModel() {
  const model = currentModel();
  const info = $("#model-info");
  info.replaceChildren();
  const summarizes = model && model.task === "summarization";
  $("#run").textContent = summarizes ? "Summarize" : "Translate";
  $("#output-title").textContent = summarizes ? "Summary" : "Translation";
  if (!model) return;
  const langs = summarizes ? (model.source || "?") : `${model.source || "?"} → ${model.target || "?"}`;
  info.append(el("span", {class: "chip task"}, `${model.task} · ${langs}`));
  const p = model.parameters || {};
  info.append(paramChip("N", "", p.N), paramChip("d", "model", p.d_model), paramChip("d", "ff", p.d_ff),
    paramChip("h", "", p.h));
  info.append(el("span", {class: "chip muted"}, `inputs up to ${model.max_length} tokens`));
  renderExamples(model);
  if (model.dtype && model.dtype !== "auto") {
    const note = `${model.dtype} weights`;
    info.append(el("span", {class: "chip muted", "data-param": "dtype"}, note));
  }
}

function renderExamples(model) {
  const english = model.task === "summarization" || !model.source || model.source === "en";
  const texts = english ? EXAMPLES[model.task] || [] : [];
  $("#examples").hidden = texts.length === 0;
  $("#example-list").replaceChildren(...texts.map((text) => {
    const button = el("button", {type: "button", class: "example", "data-testid": "example"}, text);
    button.addEventListener("click", () => {
      $("#input").value = text;
      $("#input").dispatchEvent(new Event("input"));
      run();
    });
    return button;
  }));
}

// -- the page's state in the URL ------------------------------------------------------------------

function saveUrl() {
  const q = new URLSearchParams();
  const model = currentModel();
  if (model) q.set("model", model.id);
  if ($("#input").value) q.set("text", $("#input").value);
  for (const [name, id] of Object.entries(URL_FIELDS)) if ($(id).value.trim() !== "") q.set(name, $(id).value.trim());
  if ($("#truncate").checked) q.set("truncate", "1");
  if (!$("#with-attention").checked) q.set("attention", "0");
  for (const name of ["kind", "layer", "head", "view", "units"]) q.set(name, String(state[name]));
  history.replaceState(null, "", `#${q}`);
}

/** Fill the page from the URL's state; true when it names a text to run. */
function loadUrl() {
  const q = new URLSearchParams(location.hash.slice(1));
  if (q.has("model") && state.models.some((m) => m.id === q.get("model"))) {
    $("#model").value = q.get("model");
    showModel();
  }
  for (const [name, id] of Object.entries(URL_FIELDS)) if (q.has(name)) $(id).value = q.get(name);
  $("#truncate").checked = q.get("truncate") === "1";
  $("#with-attention").checked = q.get("attention") !== "0";
  if (q.has("text")) {
    $("#input").value = q.get("text");
    $("#input").dispatchEvent(new Event("input"));
  }
  const layer = Number(q.get("layer")), head = q.get("head");
  state.restore = {kind: q.get("kind"), layer: Number.isInteger(layer) ? layer : null,
    head: head === null || head === "mean" ? "mean" : Number(head), view: q.get("view"), units: q.get("units")};
  if ((q.get("text") || "").trim()) $("#options").open = [...q.keys()].some((k) => k in URL_FIELDS);
  return Boolean((q.get("text") || "").trim());
}

/** The view a shared URL asked for, as far as this attention has it. */
function applyRestore() {
  const r = state.restore;
  state.restore = null;
  if (!r) return;
  if (r.kind in KIND_NAMES && state.attention[r.kind]) selectKind(r.kind);
  const stack = stackOf(state.kind);
  if (r.layer !== null && r.layer >= 0 && r.layer < stack.length) state.layer = r.layer;
  if (r.head === "mean" || (Number.isInteger(r.head) && r.head >= 0 && r.head < stack[0].length)) state.head = r.head;
  for (const [name, values] of [["view", ["matrix", "lines", "table"]], ["units", ["pieces", "words"]]]) {
    if (values.includes(r[name])) {
      state[name] = r[name];
      $(`input[name=${name}][value=${r[name]}]`).checked = true;
    }
  }
}

function fillModels(body) {
  state.models = body.models || [];
  const select = $("#model");
  select.replaceChildren();
  for (const m of state.models) {
    select.append(el("option", {value: m.id}, `${m.id} (${m.task})`));
  }
  if (state.models.length === 0) select.append(el("option", {value: ""}, "no models"));
  const errors = Object.entries(body.errors || {});
  $("#model-errors").hidden = errors.length === 0;
  $("#model-errors").textContent = errors.map(([id, why]) => `${id} could not be read: ${why}`).join("\n");
  select.disabled = state.models.length === 0;
  $("#run").disabled = state.models.length === 0;
  if (state.models.length === 0) showError({code: "no_models", message: "the service has no models to offer"});
  showModel();
}

async function refreshModels() {
  setStatus("Loading models…", true);
  try {
    fillModels(await loadModels());
    clearError();
    setStatus("");
    if (location.hash.length > 1 && !state.attention && loadUrl()) run(); // a shared view: run it again
  } catch (e) {
    setStatus("");
    showError(e);
  }
}

// -- decoding -------------------------------------------------------------------------------------

/** An integer field's value, undefined when empty; throws on anything else than a whole number. */
function intField(id, name) {
  const raw = $(id).value.trim();
  if (raw === "") return undefined;
  if (!/^\d+$/.test(raw)) throw new ApiError("invalid_option", `${name} must be a whole number, got “${raw}”`);
  return Number(raw);
}

function decodeOptions() {
  const penalty = $("#length-penalty").value.trim();
  if (penalty !== "" && !Number.isFinite(Number(penalty))) {
    throw new ApiError("invalid_option", `length penalty must be a number, got “${penalty}”`);
  }
  return {
    beam_size: intField("#beam-size", "beam size") ?? 4,
    n_best: intField("#n-best", "n-best") ?? 1,
    length_penalty: penalty === "" ? 0.6 : Number(penalty),
    max_length: intField("#max-length", "max output tokens"),
    min_length: intField("#min-length", "min output tokens") ?? 0,
    no_repeat_ngram_size: intField("#no-repeat", "no-repeat n-gram") ?? 0,
    truncate: $("#truncate").checked,
  };
}

function showOutput(item, pickable) {
  $("#best").textContent = item.text;
  const tokens = $("#best-tokens");
  tokens.replaceChildren(...item.tokens.map((t) => el("span", {class: "token", title: t}, pieceLabel(t))));
  const list = $("#nbest");
  list.replaceChildren();
  const all = [{text: item.text, score: item.score}, ...item.alternatives];
  all.forEach((h, i) => {
    const li = el("li", {"data-testid": "nbest-item", "data-score": h.score, class: i === 0 ? "first" : ""});
    li.append(el("span", {class: "score", title: String(h.score)}, h.score.toFixed(3)));
    li.append(el("span", {class: "text"}, h.text));
    if (i === 0) li.append(el("span", {class: "tag best-tag"}, "best"));
    if (pickable) {
      li.append(el("button", {type: "button", class: "pick", "data-testid": "nbest-pick", "aria-pressed": i === 0,
        "aria-label": `Show the attention of hypothesis ${i + 1}`}, "attention"));
      li.lastChild.addEventListener("click", () => pickHypothesis(i));
    }
    list.append(li);
  });
  $("#output-card").dataset.state = "done";
  $("#announce").textContent = `${$("#output-title").textContent}: ${item.text}`;
}

/** The output card's shape ({text, score, tokens, alternatives}) of a POST /attention answer's n-best list. */
function outputOf(attention) {
  const [best, ...rest] = attention.hypotheses;
  return {text: best.text, score: best.score, tokens: best.tokens, alternatives: rest};
}

/** Draw no attention, saying why: nothing left on screen can belong to another output than the one shown. */
function clearAttention(why, cardState) {
  state.attention = null;
  const card = $("#attention-card");
  card.dataset.state = cardState;
  $("#attention-of").textContent = why;
  for (const id of ["#heatmap", "#lines", "#thumbs", "#tooltip"]) $(id).replaceChildren();
  delete $("#heatmap").dataset.rows;
  delete $("#heatmap").dataset.cols;
  $("#caption").textContent = "";
  $("#tooltip").hidden = true;
  const legend = $("#legend-bar");
  legend.getContext("2d").clearRect(0, 0, legend.width, legend.height);
  $("#legend-max").textContent = "";
  $("#export-json").disabled = $("#export-png").disabled = true;
}

/** Draw the attention of hypothesis i of the last run's n-best list (decoded again with the same options). */
async function pickHypothesis(i) {
  if (!state.request) return;
  clearError();
  for (const [j, button] of document.querySelectorAll("#nbest .pick").entries()) {
    button.setAttribute("aria-pressed", String(j === i));
  }
  clearAttention("Computing the attention of hypothesis " + (i + 1) + "…", "loading");
  setBusy(true, "Computing attention…");
  try {
    showAttention(await api("attention", {...state.request, hypothesis: i}));
    setBusy(false, "");
  } catch (e) {
    clearAttention("No attention: the last request failed.", "error");
    setBusy(false, "");
    showError(e);
  }
}

async function run() {
  const model = currentModel();
  const text = $("#input").value;
  clearError();
  if (!model) return;
  if (!text.trim()) {
    showError({code: "empty", message: "type a text first"});
    return;
  }
  let options;
  try {
    options = decodeOptions();
  } catch (e) {
    showError(e);
    return;
  }
  const summarizes = model.task === "summarization";
  const card = $("#output-card");
  card.hidden = false;
  card.dataset.state = "loading";
  $("#echo").textContent = text;
  $("#best").textContent = "";
  $("#best-tokens").replaceChildren();
  $("#nbest").replaceChildren();
  const withAttention = $("#with-attention").checked;
  state.request = null;
  clearAttention(withAttention ? "Computing…" : "", withAttention ? "loading" : "idle");
  $("#attention-card").hidden = !withAttention;
  setBusy(true, summarizes ? "Summarizing…" : "Translating…");
  try {
    const body = {q: text, model: model.id, ...options};
    saveUrl();
    if (withAttention) { // one decode gives the output and the attention of the hypothesis shown
      const attention = await api("attention", body);
      state.request = body;
      showOutput(outputOf(attention), true);
      showAttention(attention);
    } else {
      const data = await api(summarizes ? "summarize" : "translate", body);
      showOutput(summarizes ? data.summaries[0] : data.translations[0], false);
    }
    setBusy(false, "");
  } catch (e) {
    if (card.dataset.state === "loading") card.dataset.state = "error";
    if (withAttention) clearAttention("No attention: the last run failed.", "error");
    setBusy(false, "");
    showError(e);
  }
}

// -- attention: choosing a matrix -----------------------------------------------------------------

function stackOf(kind) {
  return state.attention[kind] || [];
}

/** Row and column tokens; decoder keys are its inputs: the start symbol, then the output so far. */
function labelsOf(kind) {
  const a = state.attention;
  if (kind === "cross") return [a.target_tokens, a.source_tokens];
  if (kind === "encoder") return [a.source_tokens, a.source_tokens];
  return [a.target_tokens, [START, ...a.target_tokens.slice(0, -1)]];
}

/** Weights of kind between pieces, or between words in words mode (mergeWords). */
function inUnits(weights, kind) {
  if (state.units !== "words") return weights;
  const [rows, cols] = labelsOf(kind);
  return mergeWords(weights, wordsOf(rows).groups, wordsOf(cols).groups);
}

/** One head's weights, or the mean over a layer's heads. */
function weightsOf(kind, layer, head) {
  const heads = stackOf(kind)[layer];
  if (head !== "mean") return heads[head];
  return heads[0].map((row, i) => row.map((_, j) => heads.reduce((sum, m) => sum + m[i][j], 0) / heads.length));
}

function maxOf(weights) {
  let max = 0;
  for (const row of weights) for (const w of row) max = Math.max(max, w);
  return max || 1;
}

function currentMatrix() {
  let weights = weightsOf(state.kind, state.layer, state.head);
  let [rows, cols] = labelsOf(state.kind);
  const heads = stackOf(state.kind)[state.layer].length;
  const which = state.head === "mean" ? `mean over ${heads} heads` : `head ${state.head}`;
  let [rowAxis, colAxis] = AXES[state.kind];
  let units = "Pieces as SentencePiece cut them; · marks a piece that continues the word before it.";
  weights = inUnits(weights, state.kind);
  if (state.units === "words") {
    [rows, cols] = [wordsOf(rows).labels, wordsOf(cols).labels];
    [rowAxis, colAxis] = [rowAxis.replace("tokens", "words"), colAxis.replace("tokens", "words")];
    units = "Words: the weights of a column word are summed over its pieces, those of a row word averaged over "
      + "its pieces.";
  } else {
    [rows, cols] = [rows.map(pieceLabel), cols.map(pieceLabel)];
  }
  return {weights, rows, cols, max: state.sharedScale ? sharedMax(state.kind) : maxOf(weights), rowAxis, colAxis,
    units, masked: maskOf(state.kind), title: `${KIND_NAMES[state.kind]}, layer ${state.layer}, ${which}`};
}

/** The largest weight of any layer and head of kind (in the units shown): one scale to compare heads by. */
function sharedMax(kind) {
  let max = 0;
  stackOf(kind).forEach((heads, layer) => heads.forEach((_, head) => {
    max = Math.max(max, maxOf(inUnits(weightsOf(kind, layer, head), kind)));
  }));
  return max || 1;
}

/** (row, col) -> whether the cell is masked: a decoder query may not attend to later positions (§3.2.3). In
 * words mode a word is masked from a later word: every piece of it comes after every piece of the query word. */
function maskOf(kind) {
  if (kind !== "decoder") return () => false;
  if (state.units !== "words") return (i, j) => j > i;
  const [rows, cols] = labelsOf(kind);
  const [rg, cg] = [wordsOf(rows).groups, wordsOf(cols).groups];
  return (i, j) => cg[j][0] > rg[i][rg[i].length - 1];
}

function showAttention(attention) {
  state.attention = attention;
  $("#export-json").disabled = $("#export-png").disabled = false;
  for (const kind of ["encoder", "decoder"]) {
    $(`[data-testid=kind-${kind}]`).disabled = !attention[kind];
  }
  if (!attention[state.kind]) selectKind("cross");
  state.layer = stackOf(state.kind).length - 1;
  state.head = "mean";
  applyRestore();
  const card = $("#attention-card");
  card.hidden = false;
  const n = attention.hypotheses.length;
  const which = attention.hypothesis === 0 ? `the best output${n > 1 ? ` of ${n}` : ""}`
    : `hypothesis ${attention.hypothesis + 1} of ${n}`;
  $("#attention-of").textContent = `Of ${which}: “${attention.text}” (score ${attention.score.toFixed(3)})`;
  fillSelectors();
  render();
  card.dataset.state = "done";
}

function fillSelectors() {
  const stack = stackOf(state.kind);
  const layer = $("#layer");
  layer.replaceChildren(...stack.map((_, i) => el("option", {value: i}, String(i))));
  layer.value = String(state.layer);
  const head = $("#head");
  head.replaceChildren(el("option", {value: "mean"}, "mean"), ...stack[0].map((_, i) => el("option", {value: i},
    String(i))));
  head.value = String(state.head);
}

function selectKind(kind) {
  state.kind = kind;
  $(`[data-testid=kind-${kind}]`).checked = true;
  const layers = stackOf(kind).length;
  if (state.layer >= layers) state.layer = layers - 1;
  if (state.head !== "mean" && state.head >= stackOf(kind)[0].length) state.head = "mean";
}

function choose(layer, head) {
  state.layer = layer;
  state.head = head;
  $("#layer").value = String(layer);
  $("#head").value = String(head);
  render();
}

function render() {
  if (!state.attention) return;
  saveUrl();
  state.matrix = currentMatrix();
  const m = state.matrix;
  $("#caption").textContent = `${m.title}. Rows: ${m.rowAxis} (${m.rows.length}); columns: ${m.colAxis} `
    + `(${m.cols.length}); each row sums to 1. ${m.units}`;
  $("#matrix-view").hidden = state.view !== "matrix";
  $("#lines-view").hidden = state.view !== "lines";
  $("#table-view").hidden = state.view !== "table";
  if (state.view === "table") renderTable(m);
  renderHeatmap(m);
  renderLegend(m);
  renderLines(m);
  renderThumbs();
}

// -- attention: the heatmap -----------------------------------------------------------------------

function cellSize(rows, cols) {
  if (typeof state.zoom === "number") return state.zoom;
  if (state.zoom === "fit") { // the row labels take up to 180 px of the box; cells may be a fraction of a pixel
    const width = $(".heatmap-scroll").clientWidth - 200;
    return Math.max(0.25, Math.min(36, width / cols));
  }
  return Math.max(14, Math.min(36, Math.floor(640 / Math.max(rows, cols))));
}

/** Backing-store pixels per CSS pixel for a canvas of this CSS size: the screen's ratio (sharp on any screen),
 * less where the canvas would pass the browser's limits. */
function canvasRatio(width, height) {
  const ratio = window.devicePixelRatio || 1;
  return Math.min(ratio, MAX_CANVAS_SIDE / width, MAX_CANVAS_SIDE / height, Math.sqrt(MAX_CANVAS_PIXELS / (width * height)));
}

/** Draw the weights, one square per cell, into a canvas of cell-sized squares. */
function drawCells(canvas, m, cell) {
  const [width, height] = [m.cols.length * cell, m.rows.length * cell];
  const ratio = canvasRatio(width, height);
  canvas.width = Math.floor(width * ratio);
  canvas.height = Math.floor(height * ratio);
  canvas.style.width = `${width}px`;
  canvas.style.height = `${height}px`;
  const ctx = canvas.getContext("2d");
  ctx.scale(ratio, ratio);
  m.weights.forEach((row, i) => row.forEach((w, j) => {
    ctx.fillStyle = css(m.masked(i, j) ? MASKED : colour(w / m.max));
    ctx.fillRect(j * cell, i * cell, cell, cell);
  }));
}

function labelList(className, tokens, cell, axis) {
  const box = el("div", {class: `${className}s`, "data-testid": `${className}s`});
  tokens.forEach((token, i) => {
    const label = el("div", {class: className, "data-index": i, title: token}, short(token));
    label.style[axis] = `${cell}px`;
    label.style.lineHeight = `${cell}px`;
    if (cell < 12) label.style.fontSize = `${Math.max(cell - 1, 0)}px`; // zoomed out: shrink, or hide below 6 px
    if (cell < 6) label.style.visibility = "hidden";
    label.addEventListener("mouseenter", () => setHover(className === "row-label" ? i : null,
      className === "col-label" ? i : null));
    label.addEventListener("mouseleave", () => setHover(null, null));
    box.append(label);
  });
  return box;
}

function renderHeatmap(m) {
  const box = $("#heatmap");
  const cell = cellSize(m.rows.length, m.cols.length);
  box.dataset.rows = m.rows.length;
  box.dataset.cols = m.cols.length;
  box.dataset.cell = cell;
  box.dataset.hoverRow = "";
  box.dataset.hoverCol = "";
  state.hover = {row: null, col: null};
  const corner = el("div", {class: "corner"});
  corner.append(el("span", {class: "axis-x"}, `${m.colAxis} →`), el("span", {class: "axis-y"}, `↓ ${m.rowAxis}`));
  const plot = el("div", {class: "plot"});
  const canvas = el("canvas", {id: "heatmap-canvas", "data-testid": "heatmap-canvas"});
  const overlay = el("canvas", {class: "overlay", "aria-hidden": "true"});
  drawCells(canvas, m, cell);
  overlay.width = canvas.width;
  overlay.height = canvas.height;
  overlay.style.width = canvas.style.width;
  overlay.style.height = canvas.style.height;
  plot.append(canvas, overlay);
  canvas.setAttribute("role", "img");
  canvas.setAttribute("tabindex", "0"); // the arrow keys move between cells (pinCell), each value announced
  canvas.setAttribute("aria-label", `${m.title}: ${m.rows.length} by ${m.cols.length} weights. Arrow keys move `
    + "between cells; the Table view lists every value.");
  state.pinned = null;
  const cellAt = (event) => {
    const rect = canvas.getBoundingClientRect();
    const col = Math.floor((event.clientX - rect.left) / rect.width * m.cols.length);
    const row = Math.floor((event.clientY - rect.top) / rect.height * m.rows.length);
    return row >= 0 && row < m.rows.length && col >= 0 && col < m.cols.length ? {row, col} : null;
  };
  canvas.addEventListener("mousemove", (event) => {
    const at = cellAt(event);
    if (at && !state.pinned) setHover(at.row, at.col, event);
  });
  canvas.addEventListener("mouseleave", () => {
    if (!state.pinned) setHover(null, null);
  });
  canvas.addEventListener("click", (event) => { // a tap on a phone: pins the cell, a second tap lets go
    const at = cellAt(event);
    const same = at && state.pinned && state.pinned.row === at.row && state.pinned.col === at.col;
    pinCell(same ? null : at);
  });
  canvas.addEventListener("keydown", (event) => {
    const moves = {ArrowUp: [-1, 0], ArrowDown: [1, 0], ArrowLeft: [0, -1], ArrowRight: [0, 1]};
    if (event.key === "Escape") {
      pinCell(null);
    } else if (moves[event.key]) {
      const [dr, dc] = moves[event.key];
      const from = state.pinned || {row: 0, col: 0};
      const clamp = (x, n) => Math.min(n - 1, Math.max(0, x));
      pinCell(state.pinned ? {row: clamp(from.row + dr, m.rows.length), col: clamp(from.col + dc, m.cols.length)}
        : from);
    } else {
      return;
    }
    event.preventDefault();
  });
  box.replaceChildren(corner, labelList("col-label", m.cols, cell, "width"),
    labelList("row-label", m.rows, cell, "height"), plot);
}

/** A cell's weight as text, or "masked" where the decoder may not look. */
function valueText(m, row, col) {
  return m.masked(row, col) ? "masked" : m.weights[row][col].toFixed(3);
}

/** Pin a cell (or let go, with null): it stays highlighted with its value shown, and the value is announced. */
function pinCell(at) {
  state.pinned = at;
  const live = $("#cell-live");
  if (!at) {
    setHover(null, null);
    live.textContent = "";
    return;
  }
  setHover(at.row, at.col, null, true);
  const m = state.matrix;
  live.textContent = `${m.rows[at.row]} → ${m.cols[at.col]}: ${valueText(m, at.row, at.col)}`;
  const label = $(`#heatmap .row-label[data-index="${at.row}"]`); // keep the cell in view while moving
  if (label) label.scrollIntoView({block: "nearest", inline: "nearest"});
}

/** Highlight a row and/or a column: labels get the class "hl", the heatmap data-hover-row/-col. */
function setHover(row, col, event, pinned = false) {
  const box = $("#heatmap");
  if (state.hover.row === row && state.hover.col === col && !event && !pinned) return;
  state.hover = {row, col};
  box.dataset.hoverRow = row === null ? "" : row;
  box.dataset.hoverCol = col === null ? "" : col;
  for (const label of box.querySelectorAll(".hl")) label.classList.remove("hl");
  if (row !== null) box.querySelector(`.row-label[data-index="${row}"]`).classList.add("hl");
  if (col !== null) box.querySelector(`.col-label[data-index="${col}"]`).classList.add("hl");
  drawHover(row, col);
  showTooltip(row, col, event, pinned);
}

function drawHover(row, col) {
  const overlay = $("#heatmap .overlay");
  const cell = Number($("#heatmap").dataset.cell);
  const width = parseFloat(overlay.style.width);
  const height = parseFloat(overlay.style.height);
  const ratio = overlay.width / width; // as drawCells chose it
  const ctx = overlay.getContext("2d");
  ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
  ctx.clearRect(0, 0, width, height);
  ctx.fillStyle = "rgba(255, 176, 32, 0.22)";
  if (row !== null) ctx.fillRect(0, row * cell, width, cell);
  if (col !== null) ctx.fillRect(col * cell, 0, cell, height);
  if (row !== null && col !== null) {
    ctx.strokeStyle = "#e8590c";
    ctx.lineWidth = 2;
    ctx.strokeRect(col * cell + 1, row * cell + 1, cell - 2, cell - 2);
  }
}

/** The value of a cell beside the pointer, or beside the cell itself when it is pinned. */
function showTooltip(row, col, event, pinned = false) {
  const tip = $("#tooltip");
  const m = state.matrix;
  if (row === null || col === null || (!event && !pinned)) {
    tip.hidden = true;
    return;
  }
  tip.replaceChildren(el("span", {class: "token"}, m.rows[row]), el("span", {class: "arrow"}, " → "),
    el("span", {class: "token"}, m.cols[col]), el("strong", {"data-testid": "tooltip-weight"},
      valueText(m, row, col)));
  const view = $("#matrix-view").getBoundingClientRect();
  const canvas = $("#heatmap-canvas").getBoundingClientRect();
  const cell = canvas.width / m.cols.length;
  const x = event ? event.clientX : canvas.left + (col + 1) * cell;
  const y = event ? event.clientY : canvas.top + (row + 1) * cell;
  tip.style.left = `${Math.min(x - view.left + 14, view.width - 220)}px`;
  tip.style.top = `${y - view.top + 14}px`;
  tip.hidden = false;
  tip.dataset.pinned = String(pinned);
}

function renderLegend(m) {
  const bar = $("#legend-bar");
  const ctx = bar.getContext("2d");
  for (let x = 0; x < bar.width; x++) {
    ctx.fillStyle = css(colour(x / (bar.width - 1)));
    ctx.fillRect(x, 0, 1, bar.height);
  }
  $("#legend-max").textContent = m.max.toFixed(3) + (state.sharedScale ? " (every head)" : "");
  $("#legend-masked").hidden = state.kind !== "decoder";
}

// -- attention: lines, as tensor2tensor draws them ------------------------------------------------

function renderLines(m) {
  const svg = $("#lines");
  svg.replaceChildren();
  const rowHeight = 22;
  const top = 34;
  const leftX = 190;
  const rightX = 430;
  const n = Math.max(m.rows.length, m.cols.length);
  const height = top + n * rowHeight + 8;
  svg.setAttribute("viewBox", `0 0 620 ${height}`);
  svg.setAttribute("width", "100%"); // as wide as the card allows, at most 620 px (style.css)
  svg.style.aspectRatio = `620 / ${height}`;
  const keyY = (j) => top + j * rowHeight + rowHeight / 2;
  const queryY = (i) => top + i * rowHeight + rowHeight / 2;
  svg.append(svgEl("text", {x: leftX - 10, y: 16, class: "axis", "text-anchor": "end"}, `${m.colAxis}`),
    svgEl("text", {x: rightX + 10, y: 16, class: "axis"}, `${m.rowAxis}`));
  const lines = svgEl("g", {class: "links"});
  const links = []; // [weight / max, row, col, head or null]
  const heads = state.everyHead ? stackOf(state.kind)[state.layer].map((_, h) => h) : [null];
  for (const head of heads) {
    const weights = head === null ? m.weights : inUnits(weightsOf(state.kind, state.layer, head), state.kind);
    const max = head === null || state.sharedScale ? m.max : maxOf(weights);
    weights.forEach((row, i) => row.forEach((w, j) => {
      if (w / max >= 0.02) links.push([w / max, i, j, head]);
    }));
  }
  if (links.length > MAX_LINES) links.sort((a, b) => b[0] - a[0]).length = MAX_LINES;
  svg.dataset.lines = links.length;
  svg.dataset.capped = links.length === MAX_LINES ? "true" : "false";
  for (const [t, i, j, head] of links) {
    const line = svgEl("line", {x1: leftX, y1: keyY(j), x2: rightX, y2: queryY(i), "stroke-opacity": t.toFixed(3),
      "data-row": i, "data-col": j});
    if (head !== null) {
      line.style.stroke = HEAD_COLOURS[head % HEAD_COLOURS.length]; // over the one colour of #lines line
      line.dataset.head = head;
    }
    lines.append(line);
  }
  svg.append(lines);
  $("#head-key").replaceChildren(...(state.everyHead ? heads.map((h) => {
    const key = el("span", {class: "head-key"});
    const swatch = el("span", {class: "swatch"});
    swatch.style.background = HEAD_COLOURS[h % HEAD_COLOURS.length];
    key.append(swatch, `head ${h}`);
    return key;
  }) : []));
  $("#lines-note").textContent = links.length === MAX_LINES
    ? `The ${MAX_LINES} strongest links are drawn; weaker ones are left out.` : "";
  const focus = (attr, index) => {
    svg.classList.toggle("focus", index !== null);
    for (const line of lines.children) line.classList.toggle("on", line.getAttribute(attr) === String(index));
  };
  const token = (text, x, y, anchor, attr, index) => {
    const node = svgEl("text", {x, y: y + 4, "text-anchor": anchor, class: "token", "data-index": index}, short(text));
    node.append(svgEl("title", {}, text));
    node.addEventListener("mouseenter", () => focus(attr, index));
    node.addEventListener("mouseleave", () => focus(attr, null));
    return node;
  };
  m.cols.forEach((t, j) => svg.append(token(t, leftX - 10, keyY(j), "end", "data-col", j)));
  m.rows.forEach((t, i) => svg.append(token(t, rightX + 10, queryY(i), "start", "data-row", i)));
}

// -- attention: a table, for screen readers and for copying ------------------------------------------

function renderTable(m) {
  const [rows, cols] = [Math.min(m.rows.length, MAX_TABLE), Math.min(m.cols.length, MAX_TABLE)];
  const table = el("table", {"data-testid": "weights-table", class: "weights"});
  table.append(el("caption", {}, `${m.title}: rows are ${m.rowAxis}, columns ${m.colAxis}`));
  const head = el("tr");
  head.append(el("th", {scope: "col"}, `${m.rowAxis} \\ ${m.colAxis}`));
  for (let j = 0; j < cols; j++) head.append(el("th", {scope: "col"}, m.cols[j]));
  const body = el("tbody");
  for (let i = 0; i < rows; i++) {
    const tr = el("tr");
    tr.append(el("th", {scope: "row"}, m.rows[i]));
    for (let j = 0; j < cols; j++) tr.append(el("td", {}, valueText(m, i, j)));
    body.append(tr);
  }
  table.append(el("thead"), body);
  table.querySelector("thead").append(head);
  const cut = rows < m.rows.length || cols < m.cols.length;
  $("#table-note").textContent = cut ? `The first ${rows} rows and ${cols} columns of ${m.rows.length} × `
    + `${m.cols.length}; Download JSON has them all.` : "";
  $("#table-scroll").replaceChildren(table);
}

// -- attention: every layer and head, as bertviz's model view -------------------------------------

function thumbnail(weights, max, masked) {
  const rows = weights.length;
  const cols = weights[0].length;
  const canvas = el("canvas", {width: cols, height: rows});
  const ctx = canvas.getContext("2d");
  const image = ctx.createImageData(cols, rows);
  weights.forEach((row, i) => row.forEach((w, j) => {
    const [r, g, b] = masked(i, j) ? MASKED : colour(w / max);
    image.data.set([r, g, b, 255], (i * cols + j) * 4);
  }));
  ctx.putImageData(image, 0, 0);
  const scale = 72 / Math.max(rows, cols); // the longer side 72 px, the shorter at least 24 px
  canvas.style.width = `${Math.max(24, Math.round(cols * scale))}px`;
  canvas.style.height = `${Math.max(24, Math.round(rows * scale))}px`;
  return canvas;
}

function renderThumbs() {
  const grid = $("#thumbs");
  const stack = stackOf(state.kind);
  const heads = stack[0].length;
  grid.style.gridTemplateColumns = `auto repeat(${heads + 1}, auto)`;
  const cells = [el("span")];
  for (let h = 0; h < heads; h++) cells.push(el("span", {class: "thumb-head"}, `head ${h}`));
  cells.push(el("span", {class: "thumb-head"}, "mean"));
  stack.forEach((_, layer) => {
    cells.push(el("span", {class: "thumb-layer"}, `layer ${layer}`));
    for (const head of [...stack[layer].keys(), "mean"]) {
      const selected = layer === state.layer && head === state.head;
      const button = el("button", {type: "button", class: selected ? "thumb selected" : "thumb",
        "data-testid": "thumb", "data-layer": layer, "data-head": head, "aria-pressed": selected,
        title: `layer ${layer}, ${head === "mean" ? "mean over heads" : `head ${head}`}`});
      const weights = inUnits(weightsOf(state.kind, layer, head), state.kind);
      button.append(thumbnail(weights, state.sharedScale ? state.matrix.max : maxOf(weights), state.matrix.masked));
      button.addEventListener("click", () => choose(layer, head));
      cells.push(button);
    }
  });
  grid.replaceChildren(...cells);
}

// -- exports --------------------------------------------------------------------------------------

function download(blob, name) {
  const url = URL.createObjectURL(blob);
  const link = el("a", {href: url, download: name});
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10000);
}

function exportName(extension) {
  const m = state.attention.model.replace(/[^\w.-]+/g, "_");
  const head = state.head === "mean" ? "mean" : `h${state.head}`;
  return `attention-${m}-${state.kind}-l${state.layer}-${head}.${extension}`;
}

/** The heatmap as a figure: title, rotated column labels, row labels, cells and a colour bar. */
function figure(m) {
  const scale = 2;
  const cell = Math.max(16, Math.min(32, Math.floor(720 / Math.max(m.rows.length, m.cols.length))));
  const font = "12px system-ui, sans-serif";
  const probe = document.createElement("canvas").getContext("2d");
  probe.font = font;
  const widest = (tokens) => Math.max(...tokens.map((t) => probe.measureText(short(t)).width));
  const left = Math.ceil(widest(m.rows)) + 48;
  const top = Math.ceil(widest(m.cols)) + 56;
  const width = left + m.cols.length * cell + 110;
  const height = top + m.rows.length * cell + 24;
  const canvas = el("canvas", {width: width * scale, height: height * scale});
  const ctx = canvas.getContext("2d");
  ctx.scale(scale, scale);
  ctx.fillStyle = "#fff";
  ctx.fillRect(0, 0, width, height);
  ctx.fillStyle = "#1f2937";
  ctx.font = "600 14px system-ui, sans-serif";
  ctx.fillText(m.title, 12, 22);
  ctx.font = font;
  m.weights.forEach((row, i) => row.forEach((w, j) => {
    ctx.fillStyle = css(m.masked(i, j) ? MASKED : colour(w / m.max));
    ctx.fillRect(left + j * cell, top + i * cell, cell, cell);
  }));
  ctx.fillStyle = "#1f2937";
  ctx.textAlign = "right";
  ctx.textBaseline = "middle";
  m.rows.forEach((t, i) => ctx.fillText(short(t), left - 6, top + (i + 0.5) * cell));
  m.cols.forEach((t, j) => {
    ctx.save();
    ctx.translate(left + (j + 0.5) * cell, top - 6);
    ctx.rotate(-Math.PI / 2);
    ctx.textAlign = "left";
    ctx.fillText(short(t), 0, 0);
    ctx.restore();
  });
  const barX = left + m.cols.length * cell + 24;
  const barHeight = Math.max(60, m.rows.length * cell);
  for (let y = 0; y < barHeight; y++) {
    ctx.fillStyle = css(colour(1 - y / (barHeight - 1)));
    ctx.fillRect(barX, top + y, 14, 1);
  }
  ctx.fillStyle = "#1f2937";
  ctx.textAlign = "left";
  ctx.fillText(m.max.toFixed(3), barX + 20, top + 6);
  ctx.fillText("0", barX + 20, top + barHeight - 6);
  return canvas;
}

function exportPng() {
  figure(state.matrix).toBlob((blob) => {
    if (blob) download(blob, exportName("png"));
  }, "image/png");
}

function exportJson() {
  download(new Blob([JSON.stringify(state.attention)], {type: "application/json"}), exportName("json"));
}

// -- wiring ---------------------------------------------------------------------------------------

function init() {
  $("#model").addEventListener("change", showModel);
  $("#run").addEventListener("click", run);
  $("#input").addEventListener("input", () => {
    const n = $("#input").value.length;
    $("#char-count").textContent = `${n} character${n === 1 ? "" : "s"}`;
  });
  $("#input").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey) && !$("#run").disabled) run();
  });
  $("#api-key").addEventListener("change", refreshModels);
  for (const radio of document.querySelectorAll("input[name=kind]")) {
    radio.addEventListener("change", () => {
      selectKind(radio.value);
      fillSelectors();
      render();
    });
  }
  for (const radio of document.querySelectorAll("input[name=view]")) {
    radio.addEventListener("change", () => {
      state.view = radio.value;
      render();
    });
  }
  $("#every-head").addEventListener("change", () => {
    state.everyHead = $("#every-head").checked;
    render();
  });
  $("#shared-scale").addEventListener("change", () => {
    state.sharedScale = $("#shared-scale").checked;
    render();
  });
  $("#zoom").addEventListener("change", () => {
    const zoom = $("#zoom").value;
    state.zoom = zoom === "auto" || zoom === "fit" ? zoom : Number(zoom);
    render();
  });
  for (const radio of document.querySelectorAll("input[name=units]")) {
    radio.addEventListener("change", () => {
      state.units = radio.value;
      render();
    });
  }
  $("#layer").addEventListener("change", () => choose(Number($("#layer").value), state.head));
  $("#head").addEventListener("change", () => {
    const head = $("#head").value;
    choose(state.layer, head === "mean" ? "mean" : Number(head));
  });
  $("#export-json").addEventListener("click", exportJson);
  $("#export-png").addEventListener("click", exportPng);
  refreshModels();
}

document.addEventListener("DOMContentLoaded", init);
