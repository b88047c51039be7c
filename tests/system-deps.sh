#!/usr/bin/env bash
# System packages the tests use, from Debian's registry when missing: Chromium (the browser demo's
# end-to-end test drives it with Playwright), redis-server (the Redis tests start private servers), tcmalloc and
# jemalloc (the worker processes' allocators, service.allocator).
set -euo pipefail
missing=()
command -v chromium >/dev/null || missing+=(chromium)
command -v redis-server >/dev/null || missing+=(redis-server)
/sbin/ldconfig -p | grep libtcmalloc_minimal >/dev/null || missing+=(libtcmalloc-minimal4)
/sbin/ldconfig -p | grep libjemalloc >/dev/null || missing+=(libjemalloc2)
if [ "${#missing[@]}" -gt 0 ]; then
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
