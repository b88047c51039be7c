// The decoding options: empty inputs that show the model's own values, and a request with only those filled in.
import {ApiError} from "./api.js";
import {$} from "./dom.js";

// The options the page has an input for: the request's name, the input, the name in the URL and in messages.
export const OPTIONS = [
  {name: "beam_size", input: "#beam-size", url: "beam_size", label: "beam size"},
  {name: "n_best", input: "#n-best", url: "n_best", label: "n-best"},
  {name: "length_penalty", input: "#length-penalty", url: "length_penalty", label: "length penalty", real: true},
  {name: "max_length", input: "#max-length", url: "max_length", label: "max output tokens"},
  {name: "min_length", input: "#min-length", url: "min_length", label: "min output tokens"},
  {name: "no_repeat_ngram_size", input: "#no-repeat", url: "no_repeat", label: "no-repeat n-gram"},
];

/** The model's own options (GET /models' decoding) as the inputs' placeholders: what an empty input gets. */
export function showOwnOptions(model) {
  for (const {name, input} of OPTIONS) {
    const own = !model ? "" : name === "max_length" ? autoLength(model.decoding) : String(model.decoding[name]);
    $(input).placeholder = own;
  }
}

/** The output limit when max_length is not sent: max_len_a × input tokens + max_len_b. */
function autoLength({max_len_a: a, max_len_b: b}) {
  if (a === 0) return `auto: ${b}`;
  return `auto: ${a === 1 ? "input" : `${a} × input`} + ${b}`;
}

/** The options filled in, by their request names; throws ApiError on a value that is not a number. */
export function decodeOptions() {
  const options = {};
  for (const {name, input, label, real} of OPTIONS) {
    const raw = $(input).value.trim();
    if (raw === "") continue;
    if (real ? !Number.isFinite(Number(raw)) : !/^\d+$/.test(raw)) {
      throw new ApiError("invalid_option", `${label} must be a ${real ? "number" : "whole number"}, got “${raw}”`);
    }
    options[name] = Number(raw);
  }
  if ($("#truncate").checked) options.truncate = true;
  return options;
}
