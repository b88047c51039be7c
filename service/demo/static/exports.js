// Downloads: the attention answer as JSON, and the heatmap shown as a PNG figure.
import {MASKED, colour, css} from "./colours.js";
import {el} from "./dom.js";
import {page} from "./page.js";
import {short} from "./tokens.js";

function download(blob, name) {
  const url = URL.createObjectURL(blob);
  const link = el("a", {href: url, download: name});
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10000);
}

function exportName(extension) {
  const model = page.attention.model.replace(/[^\w.-]+/g, "_");
  const head = page.head === "mean" ? "mean" : `h${page.head}`;
  return `attention-${model}-${page.kind}-l${page.layer}-${head}.${extension}`;
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

export function exportPng() {
  figure(page.matrix).toBlob((blob) => {
    if (blob) download(blob, exportName("png"));
  }, "image/png");
}

export function exportJson() {
  download(new Blob([JSON.stringify(page.attention)], {type: "application/json"}), exportName("json"));
}
