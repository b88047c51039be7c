// The table view: the weights as numbers, for screen readers and for copying.
import {$, el} from "./dom.js";
import {valueText} from "./matrix.js";

const MAX_TABLE = 100; // at most this many rows and columns

export function renderTable(m) {
  const [rows, cols] = [Math.min(m.rows.length, MAX_TABLE), Math.min(m.cols.length, MAX_TABLE)];
  const table = el("table", {"data-testid": "weights-table", class: "weights"});
  const head = el("tr");
  head.append(el("th", {scope: "col"}, `${m.rowAxis} \\ ${m.colAxis}`));
  for (let j = 0; j < cols; j++) head.append(el("th", {scope: "col"}, m.cols[j]));
  const thead = el("thead");
  thead.append(head);
  const body = el("tbody");
  for (let i = 0; i < rows; i++) {
    const tr = el("tr");
    tr.append(el("th", {scope: "row"}, m.rows[i]));
    for (let j = 0; j < cols; j++) tr.append(el("td", {}, valueText(m, i, j)));
    body.append(tr);
  }
  table.append(el("caption", {}, `${m.title}: rows are ${m.rowAxis}, columns ${m.colAxis}`), thead, body);
  const cut = rows < m.rows.length || cols < m.cols.length;
  $("#table-note").textContent = cut ? `The first ${rows} rows and ${cols} columns of ${m.rows.length} × `
    + `${m.cols.length}; Download JSON has them all.` : "";
  $("#table-scroll").replaceChildren(table);
}
