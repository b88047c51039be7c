#!/bin/sh
# The image's entry point. The first argument picks what the container runs:
#   api     (the default) the HTTP API:  transformer serve [ARGS...], after transformer import-models
#           when TRANSFORMER_IMPORT_MODELS lists models to import into the models volume
#   worker  a queue worker:              transformer worker [ARGS...]   (needs REDIS_URL)
#   -...    options alone go to the API: transformer serve -...
#   else    any other command, run as given: transformer import marian ..., bash, python ...
# Each case exec's, so the command becomes the container's main process and receives its signals
# (docker stop sends SIGTERM to it, not to a shell that would not pass it on).
# Configuration comes from the environment only (TRANSFORMER_*, REDIS_URL), never from files here.
set -eu

if [ "$#" -eq 0 ]; then
    set -- api
fi

# The API, after importing the models TRANSFORMER_IMPORT_MODELS lists into the models volume (once: a model
# there already is reused).
serve() {
    if [ -n "${TRANSFORMER_IMPORT_MODELS:-}" ]; then
        transformer import-models
    fi
    exec transformer serve "$@"
}

case "$1" in
    api)
        shift
        serve "$@"
        ;;
    worker)
        shift
        exec transformer worker "$@"
        ;;
    -*)
        serve "$@"
        ;;
esac

if ! command -v "$1" >/dev/null 2>&1; then
    echo "entrypoint: '$1' is neither a role (api, worker) nor a command on PATH" >&2
    exit 127
fi
exec "$@"
