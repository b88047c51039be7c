// The heatmap: a canvas of cells with the tokens along both sides, the cell under the pointer or pinned by a tap
// or the arrow keys (highlighted, its value in a tooltip and announced), and the colour legend.
import {MASKED, colour, css} from "./colours.js";
import {$, el} from "./dom.js";
import {valueText} from "./matrix.js";
import {page} from "./page.js";
import {short} from "./tokens.js";

// Browsers refuse larger canvases (Chromium: 32767 px a side, 268 M pixels in all) and draw a broken-canvas icon;
// past these, the heatmap's backing store gets fewer pixels than the screen's, not an error.
const MAX_CANVAS_SIDE = 16384;
const MAX_CANVAS_PIXELS = 1 << 26;
const MOVES = {ArrowUp: [-1, 0], ArrowDown: [1, 0], ArrowLeft: [0, -1], ArrowRight: [0, 1]};

function cellSize(rows, cols) {
  if (typeof page.zoom === "number") return page.zoom;
  if (page.zoom === "fit") { // the row labels take up to 180 px of the box; cells may be a fraction of a pixel
    const width = $(".heatmap-scroll").clientWidth - 200;
    return Math.max(0.25, Math.min(36, width / cols));
  }
  return Math.max(14, Math.min(36, Math.floor(640 / Math.max(rows, cols))));
}

/** Backing-store pixels per CSS pixel for a canvas of this CSS size: the screen's ratio (sharp on any screen),
 * less where the canvas would pass the browser's limits. */
function canvasRatio(width, height) {
  const ratio = window.devicePixelRatio || 1;
  return Math.min(ratio, MAX_CANVAS_SIDE / width, MAX_CANVAS_SIDE / height,
    Math.sqrt(MAX_CANVAS_PIXELS / (width * height)));
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
    // a pinned cell (a tap, the keys) stays until it is let go: the pointer passing over a label leaves it be
    label.addEventListener("mouseenter", () => {
      if (!page.pinned) setHover(className === "row-label" ? i : null, className === "col-label" ? i : null);
    });
    label.addEventListener("mouseleave", () => {
      if (!page.pinned) setHover(null, null);
    });
    box.append(label);
  });
  return box;
}

export function renderHeatmap(m) {
  const box = $("#heatmap");
  const cell = cellSize(m.rows.length, m.cols.length);
  box.dataset.rows = m.rows.length;
  box.dataset.cols = m.cols.length;
  box.dataset.cell = cell;
  box.dataset.hoverRow = "";
  box.dataset.hoverCol = "";
  page.hover = {row: null, col: null};
  page.pinned = null;
  const corner = el("div", {class: "corner"});
  corner.append(el("span", {class: "axis-x"}, `${m.colAxis} →`), el("span", {class: "axis-y"}, `↓ ${m.rowAxis}`));
  const plot = el("div", {class: "plot"});
  const canvas = el("canvas", {id: "heatmap-canvas", "data-testid": "heatmap-canvas", role: "img",
    tabindex: 0, // the arrow keys move between cells (pinCell), each value announced
    "aria-label": `${m.title}: ${m.rows.length} by ${m.cols.length} weights. Arrow keys move between cells; the `
      + "Table view lists every value."});
  const overlay = el("canvas", {class: "overlay", "aria-hidden": "true"});
  drawCells(canvas, m, cell);
  overlay.width = canvas.width;
  overlay.height = canvas.height;
  overlay.style.width = canvas.style.width;
  overlay.style.height = canvas.style.height;
  plot.append(canvas, overlay);
  listen(canvas, m);
  box.replaceChildren(corner, labelList("col-label", m.cols, cell, "width"),
    labelList("row-label", m.rows, cell, "height"), plot);
}

/** The pointer highlights the cell under it; a click or tap pins a cell, the arrow keys move the pin. */
function listen(canvas, m) {
  const cellAt = (event) => {
    const rect = canvas.getBoundingClientRect();
    const col = Math.floor((event.clientX - rect.left) / rect.width * m.cols.length);
    const row = Math.floor((event.clientY - rect.top) / rect.height * m.rows.length);
    return row >= 0 && row < m.rows.length && col >= 0 && col < m.cols.length ? {row, col} : null;
  };
  canvas.addEventListener("mousemove", (event) => {
    const at = cellAt(event);
    if (at && !page.pinned) setHover(at.row, at.col, event);
  });
  canvas.addEventListener("mouseleave", () => {
    if (!page.pinned) setHover(null, null);
  });
  canvas.addEventListener("click", (event) => { // a tap on a phone: pins the cell, a second tap lets go
    const at = cellAt(event);
    const same = at && page.pinned && page.pinned.row === at.row && page.pinned.col === at.col;
    pinCell(same ? null : at);
  });
  canvas.addEventListener("keydown", (event) => {
    if (event.key === "Escape") {
      pinCell(null);
    } else if (MOVES[event.key]) {
      const [dr, dc] = MOVES[event.key];
      const from = page.pinned || {row: 0, col: 0};
      const clamp = (x, n) => Math.min(n - 1, Math.max(0, x));
      pinCell(page.pinned ? {row: clamp(from.row + dr, m.rows.length), col: clamp(from.col + dc, m.cols.length)}
        : from);
    } else {
      return;
    }
    event.preventDefault();
  });
}

/** Pin a cell (or let go, with null): it stays highlighted with its value shown, and the value is announced. */
function pinCell(at) {
  page.pinned = at;
  const live = $("#cell-live");
  if (!at) {
    setHover(null, null);
    live.textContent = "";
    return;
  }
  setHover(at.row, at.col, null, true);
  const m = page.matrix;
  live.textContent = `${m.rows[at.row]} → ${m.cols[at.col]}: ${valueText(m, at.row, at.col)}`;
  const label = $(`#heatmap .row-label[data-index="${at.row}"]`); // keep the cell in view while moving
  if (label) label.scrollIntoView({block: "nearest", inline: "nearest"});
}

/** Highlight a row and/or a column: labels get the class "hl", the heatmap data-hover-row/-col. */
function setHover(row, col, event, pinned = false) {
  const box = $("#heatmap");
  if (page.hover.row === row && page.hover.col === col && !event && !pinned) return;
  page.hover = {row, col};
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
  const m = page.matrix;
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

export function renderLegend(m) {
  const bar = $("#legend-bar");
  const ctx = bar.getContext("2d");
  for (let x = 0; x < bar.width; x++) {
    ctx.fillStyle = css(colour(x / (bar.width - 1)));
    ctx.fillRect(x, 0, 1, bar.height);
  }
  $("#legend-max").textContent = m.max.toFixed(3) + (page.sharedScale ? " (every head)" : "");
  $("#legend-masked").hidden = page.kind !== "decoder";
}
