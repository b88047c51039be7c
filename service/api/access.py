"""Who may call the API: the Host names it answers for, API keys checked before a body is read, per-key rate
limits and throttling of failed keys per client address, both token buckets kept by the queue (in Redis in
Redis mode)."""

from __future__ import annotations

import hashlib
import hmac
import math
from collections.abc import Iterable

from service.api.docs import ASSETS
from service.errors import BadRequest, TooManyRequests, Unauthorized
from service.queue.contract import ApiQueue
from service.settings import ServiceSettings

PUBLIC = frozenset(
    {
        "/healthz",
        "/readyz",
        "/",
        "/favicon.ico",  # and /static/...: the demo page itself
        "/languages",
        "/frontend/settings",  # says whether a key is needed
    }
)  # public in LibreTranslate too: its clients ask it without a key
OPERATIONS = frozenset({"/metrics", "/docs", "/docs/oauth2-redirect", "/redoc", "/openapi.json"})
PROBES = frozenset({"/healthz", "/readyz"})  # orchestrators ask these by address: any Host


def owner_of(key: str) -> str:
    """The id a key's jobs and rate-limit bucket are stored under; the key itself is never stored."""
    return hashlib.sha256(key.encode()).hexdigest()[:24]


def host_name(host: str) -> str:
    """The name of a Host header, without its port: example.com:8000 -> example.com, [::1]:8000 -> ::1."""
    if host.startswith("["):
        return host[1 : host.find("]")].lower()
    return (host.rsplit(":", 1)[0] if host.count(":") == 1 else host).lower()


def bearer_token(headers: Iterable[tuple[bytes, bytes]]) -> str:
    """The token of an `Authorization: Bearer TOKEN` header, or ''."""
    for name, value in headers:
        if name == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            return token.strip() if scheme.lower() == "bearer" else ""
    return ""


class Access:
    """Hosts (TRANSFORMER_ALLOWED_HOSTS) and API keys (TRANSFORMER_API_KEYS): which paths need a key, and whether
    a request may pass."""

    def __init__(self, settings: ServiceSettings, queue: ApiQueue) -> None:
        self.settings = settings
        self.queue = queue
        self.keys = settings.keys()
        self.hosts = settings.hosts()

    def check_host(self, path: str, headers: Iterable[tuple[bytes, bytes]]) -> None:
        """BadRequest unless the Host header names a host of TRANSFORMER_ALLOWED_HOSTS (any, when it is empty);
        the probes answer any."""
        if not self.hosts or path in PROBES:
            return
        name = host_name(next((v.decode("latin-1") for k, v in headers if k == b"host"), ""))
        if not any(name == h or (h.startswith("*.") and name.endswith(h[1:])) for h in self.hosts):
            raise BadRequest("this Host is not served here (TRANSFORMER_ALLOWED_HOSTS)")

    def needs_key(self, path: str) -> bool:
        if not self.keys or path in PUBLIC or path.startswith("/static/"):
            return False
        operation = path in OPERATIONS or path.startswith(f"{ASSETS}/")
        return self.settings.ops_need_key or not operation

    async def check(
        self, path: str, headers: Iterable[tuple[bytes, bytes]], address: str, body_key: str = ""
    ) -> str | None:
        """The owner id of the request's key (None where no key is needed); Unauthorized or TooManyRequests. The
        key is the Authorization header's, else body_key (LibreTranslate's `api_key` field)."""
        if not self.needs_key(path):
            return None
        failures = f"auth:{address}"
        per_minute = self.settings.auth_failures_per_minute
        wait = await self.queue.throttle(failures, per_minute, take=False)
        if wait > 0:  # a client guessing keys: refused before its guess is even looked at
            raise TooManyRequests(
                "too many requests with a wrong API key from this address", retry_after=math.ceil(wait)
            )
        token = (bearer_token(headers) or body_key).encode()
        key = next((k for k in self.keys if hmac.compare_digest(k.encode(), token)), None)
        if key is None:
            await self.queue.throttle(failures, per_minute, take=True)
            raise Unauthorized(
                "a valid API key is required: send 'Authorization: Bearer KEY' (or LibreTranslate's api_key field)"
            )
        owner, limit = owner_of(key), self.keys[key]
        if limit and (wait := await self.queue.throttle(f"key:{owner}", limit, take=True)) > 0:
            raise TooManyRequests(
                f"rate limit of {limit} requests per minute reached for this key", retry_after=math.ceil(wait)
            )
        return owner
