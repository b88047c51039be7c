// The output card: the best text, its pieces, and the n-best list.
import {$, el} from "./dom.js";
import {pieceLabel} from "./tokens.js";

/** Show an output ({text, score, tokens, alternatives}); with pick, each hypothesis gets a button that calls
 * pick(index) to draw its attention. */
export function showOutput(item, pick) {
  $("#best").textContent = item.text;
  $("#best-tokens").replaceChildren(...item.tokens.map((t) => el("span", {class: "token", title: t}, pieceLabel(t))));
  const all = [{text: item.text, score: item.score}, ...item.alternatives];
  $("#nbest").replaceChildren(...all.map((h, i) => {
    const li = el("li", {"data-testid": "nbest-item", "data-score": h.score, class: i === 0 ? "first" : ""});
    li.append(el("span", {class: "score", title: String(h.score)}, h.score.toFixed(3)));
    li.append(el("span", {class: "text"}, h.text));
    if (i === 0) li.append(el("span", {class: "tag best-tag"}, "best"));
    if (pick) {
      const button = el("button", {type: "button", class: "pick", "data-testid": "nbest-pick", "aria-pressed": i === 0,
        "aria-label": `Show the attention of hypothesis ${i + 1}`}, "attention");
      button.addEventListener("click", () => pick(i));
      li.append(button);
    }
    return li;
  }));
  $("#output-card").dataset.status = "done";
  $("#announce").textContent = `${$("#output-title").textContent}: ${item.text}`;
}

/** The output card's shape ({text, score, tokens, alternatives}) of a POST /attention answer's n-best list. */
export function outputOf(attention) {
  const [best, ...rest] = attention.hypotheses;
  return {text: best.text, score: best.score, tokens: best.tokens, sentences: best.sentences, alternatives: rest};
}
