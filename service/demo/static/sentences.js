// The sentences of a text of several: each source sentence beside its output, as the answer's spans place them;
// with attention on, a sentence's button draws that sentence's attention (each is translated alone).
import {$, el} from "./dom.js";

/** Show the sentence pairs of text and its output ({text, sentences}); hidden for a text of one sentence. With
 * pick, each pair gets a button that calls pick(index). */
export function showSentences(text, output, pick) {
  const spans = output.sentences || [];
  const section = $("#sentences");
  section.hidden = spans.length < 2;
  $("#sentence-rows").replaceChildren(...(section.hidden ? [] : spans.map((s, i) => {
    const row = el("tr", {"data-testid": "sentence-row"});
    row.append(el("td", {class: "muted"}, String(i + 1)), el("td", {}, text.slice(s.source[0], s.source[1])),
      el("td", {}, output.text.slice(s.output[0], s.output[1])));
    const cell = el("td", {});
    if (pick) {
      const button = el("button", {type: "button", class: "pick", "data-testid": "sentence-pick",
        "aria-pressed": i === 0, "aria-label": `Show the attention of sentence ${i + 1}`}, "attention");
      button.addEventListener("click", () => pick(i));
      cell.append(button);
    }
    row.append(cell);
    return row;
  })));
}

/** Mark sentence i as the one whose attention is drawn. */
export function pressSentence(i) {
  for (const [j, button] of document.querySelectorAll("#sentence-rows .pick").entries()) {
    button.setAttribute("aria-pressed", String(j === i));
  }
}
