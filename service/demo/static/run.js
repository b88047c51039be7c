// A run: the text and the options filled in, sent to the model; its output shown, and its attention drawn.
import {api} from "./api.js";
import {clearAttention, showAttention} from "./attention.js";
import {$} from "./dom.js";
import {chosenPair, currentModel} from "./models.js";
import {decodeOptions} from "./options.js";
import {outputOf, showOutput} from "./output.js";
import {page} from "./page.js";
import {pressSentence, showSentences} from "./sentences.js";
import {clearError, setBusy, showError} from "./status.js";
import {saveUrl} from "./url.js";

export async function run() {
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
  card.dataset.status = "loading";
  $("#echo").textContent = text;
  $("#best").textContent = "";
  $("#best-tokens").replaceChildren();
  $("#nbest").replaceChildren();
  const withAttention = $("#with-attention").checked;
  page.request = null;
  clearAttention(withAttention ? "Computing…" : "", withAttention ? "loading" : "idle");
  $("#attention-card").hidden = !withAttention;
  setBusy(true, summarizes ? "Summarizing…" : "Translating…");
  try {
    const body = {q: text, model: model.id, ...chosenPair(), ...options};
    saveUrl();
    if (withAttention) { // one decode gives the output and the attention of the hypothesis shown
      const attention = await api("attention", body);
      page.request = body;
      const output = outputOf(attention);
      showOutput(output, pickHypothesis);
      showSentences(text, output, pickSentence);
      showAttention(attention);
    } else {
      const data = await api(summarizes ? "summarize" : "translate", body);
      const output = summarizes ? data.summaries[0] : data.translations[0];
      showOutput(output, null);
      showSentences(text, output, null);
    }
    setBusy(false, "");
  } catch (e) {
    if (card.dataset.status === "loading") card.dataset.status = "error";
    if (withAttention) clearAttention("No attention: the last run failed.", "error");
    setBusy(false, "");
    showError(e);
  }
}

/** Draw the attention of hypothesis i of the last run's n-best list (decoded again with the same options), of the
 * sentence picked last. */
async function pickHypothesis(i) {
  if (!page.request) return;
  for (const [j, button] of document.querySelectorAll("#nbest .pick").entries()) {
    button.setAttribute("aria-pressed", String(j === i));
  }
  page.request = {...page.request, hypothesis: i};
  await drawPicked(`hypothesis ${i + 1}`);
}

/** Draw the attention of sentence i of the last run's text, of the hypothesis picked last. */
async function pickSentence(i) {
  if (!page.request) return;
  pressSentence(i);
  page.request = {...page.request, sentence: i};
  await drawPicked(`sentence ${i + 1}`);
}

async function drawPicked(what) {
  clearError();
  clearAttention(`Computing the attention of ${what}…`, "loading");
  setBusy(true, "Computing attention…");
  try {
    showAttention(await api("attention", page.request));
    setBusy(false, "");
  } catch (e) {
    clearAttention("No attention: the last request failed.", "error");
    setBusy(false, "");
    showError(e);
  }
}
