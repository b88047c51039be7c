// The model picker: the models GET /models offers, the chosen one's hyperparameters and texts to try with it.
import {$, el} from "./dom.js";
import {showOwnOptions} from "./options.js";
import {page} from "./page.js";
import {showError} from "./status.js";

// Texts to try, by task (translation examples are English: shown for models from English or of no stated language).
const EXAMPLES = {
  translation: ["File not found.", "Could not save the file because the disk is full.",
    "Do you want to delete the selected items?"],
  summarization: ["Return the number of items in the queue. Items that a worker has taken but not yet "
    + "acknowledged are counted too, so that a queue is empty only when every item is done."],
};

export function currentModel() {
  return page.models.find((m) => m.id === $("#model").value) || null;
}

/** Fill the picker with GET /models' answer, saying which checkpoints could not be read. */
export function fillModels(body) {
  page.models = body.models || [];
  const select = $("#model");
  select.replaceChildren(...page.models.map((m) => el("option", {value: m.id}, `${m.id} (${m.task})`)));
  if (page.models.length === 0) select.append(el("option", {value: ""}, "no models"));
  const errors = Object.entries(body.errors || {});
  $("#model-errors").hidden = errors.length === 0;
  $("#model-errors").textContent = errors.map(([id, why]) => `${id} could not be read: ${why}`).join("\n");
  select.disabled = page.models.length === 0;
  $("#run").disabled = page.models.length === 0;
  if (page.models.length === 0) showError({code: "no_models", message: "the service has no models to offer"});
  showModel();
}

/** A chip with the paper's name of a hyperparameter and its value. */
function paramChip(name, sub, value) {
  const chip = el("span", {class: "chip", "data-param": sub ? `${name}_${sub}` : name});
  const key = el("var", {}, name);
  if (sub) key.append(el("sub", {}, sub));
  chip.append(key, ` = ${value}`);
  return chip;
}

/** The chosen model's task, languages, hyperparameters, own decoding options and examples. */
export function showModel() {
  const model = currentModel();
  const info = $("#model-info");
  info.replaceChildren();
  const summarizes = model && model.task === "summarization";
  $("#run").textContent = summarizes ? "Summarize" : "Translate";
  $("#output-title").textContent = summarizes ? "Summary" : "Translation";
  showOwnOptions(model);
  showPair(model);
  if (!model) return;
  const langs = model.languages ? `${model.languages.length} languages`
    : summarizes ? (model.source || "?") : `${model.source || "?"} → ${model.target || "?"}`;
  info.append(el("span", {class: "chip task"}, `${model.task} · ${langs}`));
  const p = model.parameters || {};
  info.append(paramChip("N", "", p.N), paramChip("d", "model", p.d_model), paramChip("d", "ff", p.d_ff),
    paramChip("h", "", p.h));
  info.append(el("span", {class: "chip muted"}, `inputs up to ${model.max_length} tokens`));
  renderExamples(model);
  if (model.dtype && model.dtype !== "auto") {
    info.append(el("span", {class: "chip muted", "data-param": "dtype"}, `${model.dtype} weights`));
  }
}

/** A multilingual model's source and target menus (GET /models' `languages`), its own defaults chosen, else
 * English into German where it has them; hidden for a model of one language pair. */
function showPair(model) {
  const languages = (model && model.languages) || [];
  $("#pair").hidden = languages.length === 0;
  if (languages.length === 0) return;
  const pick = (own, wanted, other) => own
    || [wanted, ...languages].find((code) => languages.includes(code) && code !== other);
  const source = pick(model.source, "en", null);
  const target = pick(model.target, "de", source);
  for (const [id, chosen] of [["#source", source], ["#target", target]]) {
    $(id).replaceChildren(...languages.map((code) => el("option", {value: code}, code)));
    $(id).value = chosen;
  }
}

/** The chosen languages of a multilingual model, as a request names them; none for a model of one pair. */
export function chosenPair() {
  return $("#pair").hidden ? {} : {source: $("#source").value, target: $("#target").value};
}

/** Buttons that put an example text in the input and run it. */
function renderExamples(model) {
  const english = model.task === "summarization" || (model.languages ? chosenPair().source === "en"
    : !model.source || model.source === "en");
  const texts = english ? EXAMPLES[model.task] || [] : [];
  $("#examples").hidden = texts.length === 0;
  $("#example-list").replaceChildren(...texts.map((text) => {
    const button = el("button", {type: "button", class: "example", "data-testid": "example"}, text);
    button.addEventListener("click", () => {
      $("#input").value = text;
      $("#input").dispatchEvent(new Event("input"));
      $("#run").click();
    });
    return button;
  }));
}
