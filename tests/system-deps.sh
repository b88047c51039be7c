#!/usr/bin/env bash
# System packages the tests use, from Debian's registry when missing: Chromium (the browser demo's
# end-to-end test drives it with Playwright), redis-server (the Redis tests start private servers), tcmalloc and
# jemalloc (the worker processes' allocators, service.allocator).
set -euo pipefail
missing=()
command -v chromium >/dev/null || missing+=(chromium)
command -v redis-server >/dev/null || missing+=(redis-server)
/sbin/ldconfig -p | grep libtcmalloc_minimal >/dev/null || missing+=(tcmalloc)
/sbin/ldconfig -p | grep libjemalloc >/dev/null || missing+=(libjemalloc2)
if [ "${#missing[@]}" -gt 0 ]; then
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    # tcmalloc's package was renamed with the 64-bit time_t move (Debian 13, Ubuntu 24.04)
    tcmalloc=libtcmalloc-minimal4
    apt-cache show libtcmalloc-minimal4t64 >/dev/null 2>&1 && tcmalloc=libtcmalloc-minimal4t64
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
        "${missing[@]/#tcmalloc/$tcmalloc}" >/dev/null
fi
