// The lines view, as tensor2tensor draws attention: keys on the left, queries on the right, a line per weight.
import {HEAD_COLOURS} from "./colours.js";
import {$, el, svgEl} from "./dom.js";
import {inUnits, maxOf, stackOf, weightsOf} from "./matrix.js";
import {page} from "./page.js";
import {short} from "./tokens.js";

const MAX_LINES = 4000; // at most this many, the strongest (SVG slows down past a few thousand)
const ROW_HEIGHT = 22;
const TOP = 34;
const LEFT_X = 190;
const RIGHT_X = 430;

const rowY = (i) => TOP + i * ROW_HEIGHT + ROW_HEIGHT / 2;

export function renderLines(m) {
  const svg = $("#lines");
  svg.replaceChildren();
  const height = TOP + Math.max(m.rows.length, m.cols.length) * ROW_HEIGHT + 8;
  svg.setAttribute("viewBox", `0 0 620 ${height}`);
  svg.setAttribute("width", "100%"); // as wide as the card allows, at most 620 px (style.css)
  svg.style.aspectRatio = `620 / ${height}`;
  svg.append(svgEl("text", {x: LEFT_X - 10, y: 16, class: "axis", "text-anchor": "end"}, m.colAxis),
    svgEl("text", {x: RIGHT_X + 10, y: 16, class: "axis"}, m.rowAxis));
  const heads = page.everyHead ? stackOf(page.kind)[page.layer].map((_, h) => h) : [null];
  const links = strongest(m, heads);
  svg.dataset.lines = links.length;
  svg.dataset.capped = links.length === MAX_LINES ? "true" : "false";
  const lines = svgEl("g", {class: "links"});
  for (const [t, i, j, head] of links) {
    const line = svgEl("line", {x1: LEFT_X, y1: rowY(j), x2: RIGHT_X, y2: rowY(i), "stroke-opacity": t.toFixed(3),
      "data-row": i, "data-col": j});
    if (head !== null) {
      line.style.stroke = HEAD_COLOURS[head % HEAD_COLOURS.length]; // over the one colour of #lines line
      line.dataset.head = head;
    }
    lines.append(line);
  }
  svg.append(lines);
  $("#head-key").replaceChildren(...(page.everyHead ? heads.map(headKey) : []));
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
  m.cols.forEach((t, j) => svg.append(token(t, LEFT_X - 10, rowY(j), "end", "data-col", j)));
  m.rows.forEach((t, i) => svg.append(token(t, RIGHT_X + 10, rowY(i), "start", "data-row", i)));
}

/** [weight / max, row, col, head or null] of the links worth drawing (2% of the largest), at most MAX_LINES, the
 * strongest; of the matrix shown (heads [null]) or of each head of its layer. */
function strongest(m, heads) {
  const links = [];
  for (const head of heads) {
    const weights = head === null ? m.weights : inUnits(weightsOf(page.kind, page.layer, head), page.kind);
    const max = head === null || page.sharedScale ? m.max : maxOf(weights);
    weights.forEach((row, i) => row.forEach((w, j) => {
      if (w / max >= 0.02) links.push([w / max, i, j, head]);
    }));
  }
  if (links.length > MAX_LINES) links.sort((a, b) => b[0] - a[0]).length = MAX_LINES;
  return links;
}

function headKey(head) {
  const key = el("span", {class: "head-key"});
  const swatch = el("span", {class: "swatch"});
  swatch.style.background = HEAD_COLOURS[head % HEAD_COLOURS.length];
  key.append(swatch, `head ${head}`);
  return key;
}
