// The colours of attention weights: matplotlib's "Blues", as the CLI draws them, and the lines view's heads.

const BLUES = [[247, 251, 255], [222, 235, 247], [198, 219, 239], [158, 202, 225], [107, 174, 214],
  [66, 146, 198], [33, 113, 181], [8, 81, 156], [8, 48, 107]];
// A cell the decoder may not attend to (a later position): not a zero weight.
export const MASKED = [229, 231, 235];
// The lines view's colours for the heads of a layer, when each head is drawn (bertviz's head view).
export const HEAD_COLOURS = ["#1d4ed8", "#c2410c", "#15803d", "#7e22ce", "#b91c1c", "#0e7490", "#a16207",
  "#be185d"];

/** The colour of t in [0, 1] on the Blues scale, as [r, g, b]. */
export function colour(t) {
  const x = Math.min(1, Math.max(0, t)) * (BLUES.length - 1);
  const i = Math.min(BLUES.length - 2, Math.floor(x));
  const f = x - i;
  return BLUES[i].map((c, k) => Math.round(c + f * (BLUES[i + 1][k] - c)));
}

export function css([r, g, b]) {
  return `rgb(${r}, ${g}, ${b})`;
}
