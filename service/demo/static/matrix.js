// The matrix of attention shown: a kind, layer and head (or their mean) of the answer, in pieces or in words.
import {page} from "./page.js";
import {mergeWords, pieceLabel, wordsOf} from "./tokens.js";

/** The kind's weights, [layer][head][query][key]. */
export function stackOf(kind) {
  return page.attention[kind];
}

/** Row and column tokens of kind, as the answer's axes name them. */
function labelsOf(kind) {
  const axes = page.attention.axes[kind];
  return [axes.row_tokens, axes.col_tokens];
}

/** Weights of kind between pieces, or between words in words mode (mergeWords). */
export function inUnits(weights, kind) {
  if (page.units !== "words") return weights;
  const [rows, cols] = labelsOf(kind);
  return mergeWords(weights, wordsOf(rows).groups, wordsOf(cols).groups);
}

/** One head's weights, or the mean over a layer's heads. */
export function weightsOf(kind, layer, head) {
  const heads = stackOf(kind)[layer];
  if (head !== "mean") return heads[head];
  return heads[0].map((row, i) => row.map((_, j) => heads.reduce((sum, m) => sum + m[i][j], 0) / heads.length));
}

export function maxOf(weights) {
  let max = 0;
  for (const row of weights) for (const w of row) max = Math.max(max, w);
  return max || 1;
}

/** What the views draw: weights, row and column labels, axis names, title and colour scale of the choice. */
export function currentMatrix() {
  const {kind, layer, head} = page;
  const axes = page.attention.axes[kind];
  let [rows, cols] = labelsOf(kind);
  let [rowAxis, colAxis] = [axes.rows, axes.cols];
  let units = "Pieces as SentencePiece cut them; · marks a piece that continues the word before it.";
  if (page.units === "words") {
    [rows, cols] = [wordsOf(rows).labels, wordsOf(cols).labels];
    [rowAxis, colAxis] = [rowAxis.replace("tokens", "words"), colAxis.replace("tokens", "words")];
    units = "Words: the weights of a column word are summed over its pieces, those of a row word averaged over "
      + "its pieces.";
  } else {
    [rows, cols] = [rows.map(pieceLabel), cols.map(pieceLabel)];
  }
  const weights = inUnits(weightsOf(kind, layer, head), kind);
  const which = head === "mean" ? `mean over ${stackOf(kind)[layer].length} heads` : `head ${head}`;
  return {weights, rows, cols, max: page.sharedScale ? sharedMax(kind) : maxOf(weights), rowAxis, colAxis,
    units, masked: maskOf(kind), title: `${axes.title}, layer ${layer}, ${which}`};
}

/** The largest weight of any layer and head of kind (in the units shown): one scale to compare heads by. */
function sharedMax(kind) {
  let max = 0;
  stackOf(kind).forEach((heads, layer) => heads.forEach((_, head) => {
    max = Math.max(max, maxOf(inUnits(weightsOf(kind, layer, head), kind)));
  }));
  return max || 1;
}

/** (row, col) -> whether the cell is masked: a decoder query may not attend to later positions (§3.2.3). In
 * words mode a word is masked from a later word: every piece of it comes after every piece of the query word. */
function maskOf(kind) {
  if (kind !== "decoder") return () => false;
  if (page.units !== "words") return (i, j) => j > i;
  const [rows, cols] = labelsOf(kind);
  const [rg, cg] = [wordsOf(rows).groups, wordsOf(cols).groups];
  return (i, j) => cg[j][0] > rg[i][rg[i].length - 1];
}

/** A cell's weight as text, or "masked" where the decoder may not look. */
export function valueText(m, row, col) {
  return m.masked(row, col) ? "masked" : m.weights[row][col].toFixed(3);
}

/** Look at kind, keeping the layer and head where it has them. */
export function selectKind(kind) {
  page.kind = kind;
  for (const radio of document.querySelectorAll("input[name=kind]")) radio.checked = radio.value === kind;
  const layers = stackOf(kind).length;
  if (page.layer >= layers) page.layer = layers - 1;
  if (page.head !== "mean" && page.head >= stackOf(kind)[0].length) page.head = "mean";
}
