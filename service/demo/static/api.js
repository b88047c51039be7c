// The service's API: GET and POST JSON, its errors as ApiError, and the models once the service has loaded them.
import {$} from "./dom.js";
import {setStatus} from "./status.js";

/** An error answered by the service, in its {"error": {code, message, details}} shape. */
export class ApiError extends Error {
  constructor(code, message, details, status) {
    super(message);
    this.code = code;
    this.details = details;
    this.status = status;
  }
}

/** The headers every call sends: the API key, when one is given. */
export function keyHeaders() {
  const key = $("#api-key").value.trim();
  return key ? {Authorization: `Bearer ${key}`} : {};
}

/** fetch, its failure to reach the service as an ApiError. */
export async function send(path, init) {
  try {
    return await fetch(path, init);
  } catch (e) {
    throw new ApiError("network", `could not reach the service (${e.message})`, null, 0);
  }
}

/** GET (no body) or POST JSON (or a FormData) to the service; throws ApiError with the service's message. */
export async function api(path, body) {
  const headers = {Accept: "application/json", ...keyHeaders()};
  const form = body instanceof FormData;
  if (body !== undefined && !form) headers["Content-Type"] = "application/json";
  const response = await send(path, {method: body === undefined ? "GET" : "POST", headers,
    body: body === undefined || form ? body : JSON.stringify(body)});
  return answerOf(response);
}

/** A response's JSON, or the ApiError it answers. */
export async function answerOf(response) {
  let data = null;
  try {
    data = await response.json();
  } catch {
    data = null;
  }
  if (!response.ok) {
    const err = data && data.error;
    if (err) throw new ApiError(err.code, err.message, err.details, response.status);
    throw new ApiError(`http_${response.status}`, `the service answered ${response.status}`, null, response.status);
  }
  return data;
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** GET /models, waiting while the service is still loading them. */
export async function loadModels() {
  for (let attempt = 0; ; attempt++) {
    try {
      return await api("models");
    } catch (e) {
      if (e.status !== 503 || attempt >= 120) throw e;
      setStatus(`Waiting for the service: ${e.message}`, true);
      await sleep(1000);
    }
  }
}
