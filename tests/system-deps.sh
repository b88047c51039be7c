#!/usr/bin/env bash
# System packages the tests use, from Debian's registry when missing: Chromium (the browser demo's
# end-to-end test drives it with Playwright) and redis-server (the Redis tests start private servers).
set -euo pipefail
missing=()
command -v chromium >/dev/null || missing+=(chromium)
command -v redis-server >/dev/null || missing+=(redis-server)
if [ "${#missing[@]}" -gt 0 ]; then
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
