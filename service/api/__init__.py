"""The HTTP layer: the app (app, runtime, deps), what every request passes (envelope, guard, body, jsonscan,
access), the routes (text, jobs, ops), their bodies (schemas, examples), errors as answers (handlers),
LibreTranslate's API beside ours (libre) and the request metrics (metrics)."""
