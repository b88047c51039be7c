// Document mode: a file chosen or dropped on the page is translated as a batch job (POST /translate_file), its
// progress shown from GET /jobs/{id}, and its translation offered for download (GET /download_file/{id}).
import {answerOf, api, keyHeaders, send} from "./api.js";
import {$} from "./dom.js";
import {chosenPair} from "./models.js";
import {clearError, showError} from "./status.js";

const POLL_MS = 300;
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

function showProgress(done, total, text) {
  const bar = $("#file-progress");
  bar.hidden = false;
  bar.max = Math.max(total, 1);
  bar.value = done;
  $("#file-status").textContent = text;
}

/** The chosen file's job: sent with the model and the options given, polled until it ends. */
async function runJob(file) {
  const form = new FormData();
  form.append("file", file);
  form.append("model", $("#model").value);
  for (const [field, code] of Object.entries(chosenPair())) form.append(field, code);
  for (const [field, id] of [["beam_size", "#beam-size"], ["max_length", "#max-length"]]) {
    if ($(id).value) form.append(field, $(id).value);
  }
  let job = await api("translate_file", form);
  while (job.status === "queued" || job.status === "running") {
    showProgress(job.progress.done, job.progress.total,
      `${file.name}: ${job.progress.done} of ${job.progress.total} texts translated`);
    await sleep(POLL_MS);
    job = await api(`jobs/${job.id}`);
  }
  if (job.status !== "done") throw {code: job.status, message: job.error || `the job was ${job.status}`};
  return job;
}

export async function translateFile() {
  const file = $("#file").files[0];
  if (!file) return;
  clearError();
  const link = $("#file-download");
  link.hidden = true;
  $("#run-file").disabled = true;
  try {
    const job = await runJob(file);
    showProgress(job.progress.total, job.progress.total, `${file.name}: done`);
    const response = await send(`download_file/${job.id}`, {headers: keyHeaders()});
    if (!response.ok) await answerOf(response); // throws the service's error
    if (link.href) URL.revokeObjectURL(link.href);
    link.href = URL.createObjectURL(await response.blob());
    link.download = job.file;
    link.textContent = `Download ${job.file}`;
    link.hidden = false;
  } catch (e) {
    $("#file-status").textContent = "";
    showError(e);
  } finally {
    $("#run-file").disabled = !$("#file").files.length;
  }
}

/** The file input, and the input card as a place to drop a file on. */
export function initFiles() {
  const input = $("#file");
  input.addEventListener("change", () => { $("#run-file").disabled = !input.files.length; });
  $("#run-file").addEventListener("click", translateFile);
  const card = $("#compose");
  card.addEventListener("dragover", (event) => {
    if (event.dataTransfer.types.includes("Files")) event.preventDefault();
  });
  card.addEventListener("drop", (event) => {
    if (!event.dataTransfer.files.length) return;
    event.preventDefault();
    input.files = event.dataTransfer.files;
    $("#run-file").disabled = false;
    translateFile();
  });
}
