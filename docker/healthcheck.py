"""The image's HEALTHCHECK, for both of its roles: exit 0 when healthy, 1 when not (Docker's convention).

- api: GET /healthz on the port the API listens on (TRANSFORMER_HOST, TRANSFORMER_PORT) answers 200.
- worker: it has no HTTP endpoint; it is healthy when its queue, the Redis at REDIS_URL, answers PING.

The role is the first argument when given (`healthcheck.py worker`), else read from the container's main
process (/proc/1/cmdline): a `worker` argument there means a worker. Standard library only, except the
`redis` client that the project installs anyway; no curl in the image.
"""

from __future__ import annotations

import os
import sys
import urllib.request
from pathlib import Path

TIMEOUT_S = 4.0
ROLES = ("api", "worker")


def detect_role(cmdline: bytes) -> str:
    """'worker' when the main process's arguments (NUL-separated, as in /proc/PID/cmdline) include
    `worker`, else 'api'."""
    return "worker" if b"worker" in cmdline.split(b"\0") else "api"


def api_url() -> str:
    host = os.environ.get("TRANSFORMER_HOST", "127.0.0.1")
    if host in ("", "0.0.0.0", "::"):  # listening on every interface: ask on the loopback one
        host = "127.0.0.1"
    elif ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{os.environ.get('TRANSFORMER_PORT', '8000')}/healthz"


def check_api() -> str | None:
    """None when /healthz answers 200, else why not."""
    url = api_url()
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never through an HTTP(S)_PROXY
    try:
        with opener.open(url, timeout=TIMEOUT_S) as response:
            status = response.status
    except OSError as e:  # refused, timed out, or an HTTP error status (HTTPError is an OSError)
        return f"{url}: {e}"
    return None if status == 200 else f"{url}: HTTP {status}"


def check_worker() -> str | None:
    """None when the Redis at REDIS_URL answers PING, else why not."""
    url = os.environ.get("REDIS_URL")
    if not url:
        return "REDIS_URL is not set: a worker needs it"
    import redis

    try:
        redis.Redis.from_url(url, socket_timeout=TIMEOUT_S, socket_connect_timeout=TIMEOUT_S).ping()
    except (redis.RedisError, OSError) as e:
        return f"redis at {url.rpartition('@')[2]}: {e}"  # never print a password from the URL
    return None


def main(argv: list[str]) -> int:
    if argv and argv[0] in ROLES:
        role = argv[0]
    elif argv:
        print(f"usage: healthcheck.py [{'|'.join(ROLES)}]", file=sys.stderr)
        return 1
    else:
        try:
            role = detect_role(Path("/proc/1/cmdline").read_bytes())
        except OSError:
            role = "api"
    problem = check_worker() if role == "worker" else check_api()
    if problem:
        print(f"unhealthy ({role}): {problem}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
