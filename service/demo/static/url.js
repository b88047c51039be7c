// The page in the URL (after #), so that a view can be shared: the model, text, options filled in and the view.
import {$} from "./dom.js";
import {selectKind, stackOf} from "./matrix.js";
import {currentModel, showModel} from "./models.js";
import {OPTIONS} from "./options.js";
import {page} from "./page.js";

// The view's choices a URL may set, and the values each may take.
const CHOICES = {view: ["matrix", "lines", "table"], units: ["pieces", "words"]};

export function saveUrl() {
  const q = new URLSearchParams();
  const model = currentModel();
  if (model) q.set("model", model.id);
  if ($("#input").value) q.set("text", $("#input").value);
  for (const {input, url} of OPTIONS) if ($(input).value.trim() !== "") q.set(url, $(input).value.trim());
  if ($("#truncate").checked) q.set("truncate", "1");
  if (!$("#with-attention").checked) q.set("attention", "0");
  for (const name of ["kind", "layer", "head", "view", "units"]) q.set(name, String(page[name]));
  history.replaceState(null, "", `#${q}`);
}

/** Fill the page from the URL; true when it names a text to run. */
export function loadUrl() {
  const q = new URLSearchParams(location.hash.slice(1));
  if (q.has("model") && page.models.some((m) => m.id === q.get("model"))) {
    $("#model").value = q.get("model");
    showModel();
  }
  for (const {input, url} of OPTIONS) if (q.has(url)) $(input).value = q.get(url);
  $("#truncate").checked = q.get("truncate") === "1";
  $("#with-attention").checked = q.get("attention") !== "0";
  if (q.has("text")) {
    $("#input").value = q.get("text");
    $("#input").dispatchEvent(new Event("input"));
  }
  const layer = Number(q.get("layer")), head = q.get("head");
  page.restore = {kind: q.get("kind"), layer: Number.isInteger(layer) ? layer : null,
    head: head === null || head === "mean" ? "mean" : Number(head), view: q.get("view"), units: q.get("units")};
  const runs = Boolean((q.get("text") || "").trim());
  if (runs) $("#options").open = OPTIONS.some(({url}) => q.has(url));
  return runs;
}

/** The view a shared URL asked for, as far as this attention has it. */
export function applyRestore() {
  const r = page.restore;
  page.restore = null;
  if (!r) return;
  if (Object.hasOwn(page.attention.axes, r.kind)) selectKind(r.kind);
  const stack = stackOf(page.kind);
  if (r.layer !== null && r.layer >= 0 && r.layer < stack.length) page.layer = r.layer;
  if (r.head === "mean" || (Number.isInteger(r.head) && r.head >= 0 && r.head < stack[0].length)) page.head = r.head;
  for (const [name, values] of Object.entries(CHOICES)) {
    if (values.includes(r[name])) {
      page[name] = r[name];
      $(`input[name=${name}][value=${r[name]}]`).checked = true;
    }
  }
}
