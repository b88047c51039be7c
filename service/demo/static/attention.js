// The attention card: the kinds the answer has, the layer and head chosen, and every view of that matrix drawn.
import {$, el} from "./dom.js";
import {renderHeatmap, renderLegend} from "./heatmap.js";
import {renderLines} from "./lines.js";
import {currentMatrix, selectKind, stackOf} from "./matrix.js";
import {page} from "./page.js";
import {renderTable} from "./table.js";
import {renderThumbs} from "./thumbs.js";
import {applyRestore, saveUrl} from "./url.js";

/** Draw a POST /attention answer: the last layer's mean over heads, or the view a shared URL asked for. */
export function showAttention(attention) {
  page.attention = attention;
  $("#export-json").disabled = $("#export-png").disabled = false;
  if (!Object.hasOwn(attention.axes, page.kind)) page.kind = Object.keys(attention.axes)[0];
  page.layer = stackOf(page.kind).length - 1;
  page.head = "mean";
  applyRestore();
  fillKinds(attention.axes);
  const card = $("#attention-card");
  card.hidden = false;
  const n = attention.hypotheses.length;
  const which = attention.hypothesis === 0 ? `the best output${n > 1 ? ` of ${n}` : ""}`
    : `hypothesis ${attention.hypothesis + 1} of ${n}`;
  $("#attention-of").textContent = `Of ${which}: “${attention.text}” (score ${attention.score.toFixed(3)})`;
  fillSelectors();
  render();
  card.dataset.status = "done";
}

/** Draw no attention, saying why: nothing left on screen can belong to another output than the one shown. */
export function clearAttention(why, cardState) {
  page.attention = null;
  const card = $("#attention-card");
  card.dataset.status = cardState;
  $("#attention-of").textContent = why;
  for (const id of ["#kinds", "#heatmap", "#lines", "#thumbs", "#tooltip"]) $(id).replaceChildren();
  delete $("#heatmap").dataset.rows;
  delete $("#heatmap").dataset.cols;
  $("#caption").textContent = "";
  $("#tooltip").hidden = true;
  const legend = $("#legend-bar");
  legend.getContext("2d").clearRect(0, 0, legend.width, legend.height);
  $("#legend-max").textContent = "";
  $("#export-json").disabled = $("#export-png").disabled = true;
}

/** A radio button for each kind of attention the answer has, named by its axes' title less the word "attention"
 * (the group's name). */
function fillKinds(axes) {
  $("#kinds").replaceChildren(...Object.entries(axes).map(([kind, {title}]) => {
    const radio = el("input", {type: "radio", name: "kind", value: kind, "data-testid": `kind-${kind}`});
    radio.checked = kind === page.kind;
    radio.addEventListener("change", () => {
      selectKind(kind);
      fillSelectors();
      render();
    });
    const label = el("label", {title});
    label.append(radio, el("span", {}, title.replace(/[ -]attention$/, "")));
    return label;
  }));
}

function fillSelectors() {
  const stack = stackOf(page.kind);
  const layer = $("#layer");
  layer.replaceChildren(...stack.map((_, i) => el("option", {value: i}, String(i))));
  layer.value = String(page.layer);
  const head = $("#head");
  head.replaceChildren(el("option", {value: "mean"}, "mean"), ...stack[0].map((_, i) => el("option", {value: i},
    String(i))));
  head.value = String(page.head);
}

export function choose(layer, head) {
  page.layer = layer;
  page.head = head;
  $("#layer").value = String(layer);
  $("#head").value = String(head);
  render();
}

/** Draw the matrix chosen in every view, and keep the URL in step. */
export function render() {
  if (!page.attention) return;
  saveUrl();
  const m = page.matrix = currentMatrix();
  $("#caption").textContent = `${m.title}. Rows: ${m.rowAxis} (${m.rows.length}); columns: ${m.colAxis} `
    + `(${m.cols.length}); each row sums to 1. ${m.units}`;
  for (const view of ["matrix", "lines", "table"]) $(`#${view}-view`).hidden = page.view !== view;
  if (page.view === "table") renderTable(m);
  renderHeatmap(m);
  renderLegend(m);
  renderLines(m);
  renderThumbs(choose);
}
