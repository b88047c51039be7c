// The page's shared object: the models offered, the attention drawn and how the user chose to look at it.

export const page = {
  models: [],
  attention: null, // the POST /attention answer drawn, null when none is (or it would be out of date)
  request: null, // the body of the last run's POST /attention: picking a hypothesis asks again with it
  kind: "cross", // one of the answer's axes
  layer: 0,
  head: "mean", // or a head index
  view: "matrix",
  units: "pieces", // or "words": subword pieces merged into the words they spell
  zoom: "auto", // "auto" (cells of 14-36 px), "fit" (the heatmap fits the box's width), or a cell size in px
  sharedScale: false, // one colour scale for every layer and head of a kind, so that they can be compared
  everyHead: false, // the lines view draws each head of the layer in its own colour
  matrix: null, // what the heatmap shows: {weights, rows, cols, max, title, rowAxis, colAxis, units, masked}
  hover: {row: null, col: null},
  pinned: null, // {row, col}: the cell a tap, click or the arrow keys chose; its value stays shown
  restore: null, // the view a shared URL asked for, applied once its attention arrives
};
