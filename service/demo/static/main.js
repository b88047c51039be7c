// The demo page: translate or summarize with one of the service's models, then look at its attention. This
// module wires the page's controls to the modules that act on them, and loads the models.
import {loadModels} from "./api.js";
import {choose, render} from "./attention.js";
import {$} from "./dom.js";
import {exportJson, exportPng} from "./exports.js";
import {initFiles} from "./files.js";
import {fillModels, showModel} from "./models.js";
import {page} from "./page.js";
import {run} from "./run.js";
import {clearError, setStatus, showError} from "./status.js";
import {loadUrl} from "./url.js";

async function refreshModels() {
  setStatus("Loading models…", true);
  try {
    fillModels(await loadModels());
    clearError();
    setStatus("");
    if (location.hash.length > 1 && !page.attention && loadUrl()) run(); // a shared view: run it again
  } catch (e) {
    setStatus("");
    showError(e);
  }
}

/** A control that sets one of the page's choices and draws again. */
function redrawOn(selector, event, update) {
  for (const control of document.querySelectorAll(selector)) {
    control.addEventListener(event, () => {
      update(control);
      render();
    });
  }
}

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
  redrawOn("input[name=view]", "change", (radio) => { page.view = radio.value; });
  redrawOn("input[name=units]", "change", (radio) => { page.units = radio.value; });
  redrawOn("#every-head", "change", (box) => { page.everyHead = box.checked; });
  redrawOn("#shared-scale", "change", (box) => { page.sharedScale = box.checked; });
  redrawOn("#zoom", "change", ({value}) => {
    page.zoom = value === "auto" || value === "fit" ? value : Number(value);
  });
  $("#layer").addEventListener("change", () => choose(Number($("#layer").value), page.head));
  $("#head").addEventListener("change", () => {
    const head = $("#head").value;
    choose(page.layer, head === "mean" ? "mean" : Number(head));
  });
  $("#export-json").addEventListener("click", exportJson);
  $("#export-png").addEventListener("click", exportPng);
  initFiles();
  refreshModels();
}

init(); // a module runs once the document is parsed
