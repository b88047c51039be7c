// The status line, the error box, and the page while a request is on its way.
import {$} from "./dom.js";
import {page} from "./page.js";

export function setStatus(text, busy = false) {
  const status = $("#status");
  status.textContent = text;
  status.classList.toggle("busy", busy);
}

export function showError(error) {
  $("#error-code").textContent = error.code ? `${error.code}${error.status ? ` (${error.status})` : ""}` : "";
  let message = error.message || String(error);
  if (error.code === "invalid_request" && /truncate/.test(message)) {
    message += ". Or tick “cut inputs over the model's limit” in the decoding options.";
  }
  $("#error-message").textContent = message;
  $("#error").hidden = false;
}

export function clearError() {
  $("#error").hidden = true;
  $("#error-code").textContent = "";
  $("#error-message").textContent = "";
}

export function setBusy(busy, text = "") {
  for (const id of ["#run", "#model"]) $(id).disabled = busy || page.models.length === 0;
  document.body.setAttribute("aria-busy", String(busy));
  setStatus(text, busy);
}
