// Tokens as people read them: SentencePiece pieces as labels, grouped into words, and weights merged by word.

const WORD_START = "\u2581"; // SentencePiece's "▁": this piece starts a word
const CONTINUES = "\u00b7"; // shown before a piece that continues the word before it
const SPECIAL = /^(<[^>]*>|\(\w+\))$/; // </s>, <unk>, <pad>, the decoder's "(start)"
const MAX_LABEL = 16; // characters of a token shown as an axis label

/** A piece as people read it: no ▁ before a piece that starts a word, a · before one that continues one. */
export function pieceLabel(token) {
  if (SPECIAL.test(token)) return token;
  if (token.startsWith(WORD_START)) return token.slice(1) || "\u2423"; // ␣: a piece that is only a space
  return CONTINUES + token;
}

/** Pieces grouped into words: {labels, groups}, each group the indices of one word's pieces, in order. A word
 * starts at a piece that starts with ▁ and at every special token, which stays a word of its own. */
export function wordsOf(tokens) {
  const labels = [], groups = [];
  tokens.forEach((token, i) => {
    const special = SPECIAL.test(token);
    const continues = !special && !token.startsWith(WORD_START) && groups.length > 0
      && !SPECIAL.test(tokens[groups[groups.length - 1][0]]);
    if (continues) {
      groups[groups.length - 1].push(i);
      labels[labels.length - 1] += token;
    } else {
      groups.push([i]);
      labels.push(special ? token : token.replace(WORD_START, ""));
    }
  });
  return {labels: labels.map((label) => label || "\u2423"), groups}; // ␣: a word that is only a space
}

/** Weights between words: summed over the pieces of a key word (a row still sums to 1), averaged over the
 * pieces of a query word, as bertviz's and fairseq's alignment tools merge subwords. */
export function mergeWords(weights, rowGroups, colGroups) {
  return rowGroups.map((rg) => colGroups.map((cg) =>
    rg.reduce((sum, r) => sum + cg.reduce((s, c) => s + weights[r][c], 0), 0) / rg.length));
}

/** A token cut to MAX_LABEL characters for a label. */
export function short(token) {
  return token.length <= MAX_LABEL ? token : token.slice(0, MAX_LABEL - 1) + "…";
}
