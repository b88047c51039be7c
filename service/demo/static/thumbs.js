// Every layer and head of the kind shown as a small heatmap, as bertviz's model view; a click opens one.
import {MASKED, colour} from "./colours.js";
import {$, el} from "./dom.js";
import {inUnits, maxOf, stackOf, weightsOf} from "./matrix.js";
import {page} from "./page.js";

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

/** The grid of thumbnails, a row per layer and a column per head and the mean; choose(layer, head) opens one. */
export function renderThumbs(choose) {
  const grid = $("#thumbs");
  const stack = stackOf(page.kind);
  const heads = stack[0].length;
  grid.style.gridTemplateColumns = `auto repeat(${heads + 1}, auto)`;
  const cells = [el("span")];
  for (let h = 0; h < heads; h++) cells.push(el("span", {class: "thumb-head"}, `head ${h}`));
  cells.push(el("span", {class: "thumb-head"}, "mean"));
  stack.forEach((_, layer) => {
    cells.push(el("span", {class: "thumb-layer"}, `layer ${layer}`));
    for (const head of [...stack[layer].keys(), "mean"]) {
      const selected = layer === page.layer && head === page.head;
      const button = el("button", {type: "button", class: selected ? "thumb selected" : "thumb",
        "data-testid": "thumb", "data-layer": layer, "data-head": head, "aria-pressed": selected,
        title: `layer ${layer}, ${head === "mean" ? "mean over heads" : `head ${head}`}`});
      const weights = inUnits(weightsOf(page.kind, layer, head), page.kind);
      button.append(thumbnail(weights, page.sharedScale ? page.matrix.max : maxOf(weights), page.matrix.masked));
      button.addEventListener("click", () => choose(layer, head));
      cells.push(button);
    }
  });
  grid.replaceChildren(...cells);
}
