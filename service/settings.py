"""Service settings, read from the environment (prefix TRANSFORMER_, and REDIS_URL) when built, never at import."""

from __future__ import annotations

import ipaddress
import os
import re
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import AliasChoices, Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from model.config import DEVICE_NAME, DTYPE_NAMES
from model.files import FileLimits
from service.allocator import Allocator

MIN_KEY_LENGTH = 16
ORIGIN = re.compile(r"https?://[^\s/:?#]+(:\d{1,5})?")  # a browser's Origin: scheme, host and port, no path


def listed(value: str) -> list[str]:
    """The items of a comma-separated setting, stripped, blank ones left out."""
    return [item.strip() for item in value.split(",") if item.strip()]


class ServiceSettings(BaseSettings):
    """Everything the API and the workers read; every field is an environment variable (see README)."""

    # hide_input_in_errors: an invalid setting's error must not print the API keys (or a Redis password).
    model_config = SettingsConfigDict(
        env_prefix="TRANSFORMER_", frozen=True, extra="ignore", validate_by_name=True, hide_input_in_errors=True
    )

    models_dir: Path = Path("models")  # every subdirectory holding a config.json is a model
    # `transformer import-models`: models to have in models_dir, imported once (model.families.import_once):
    # comma-separated SRC or SRC=NAME, SRC a hub id (fetched on a machine that is online) or a directory
    import_models: str = ""
    redis_url: str | None = Field(default=None, validation_alias=AliasChoices("REDIS_URL", "TRANSFORMER_REDIS_URL"))
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=1, le=65535)
    device: str = "auto"  # "auto": CUDA when available, else the CPU
    dtype: str = "auto"  # "auto": float32 on the CPU, bfloat16 on CUDA; "int8" on the CPU only (model.quantize)
    threads: int | None = Field(default=None, ge=1)  # torch's CPU threads in all, shared by the workers
    # Workers a process runs (embedded: beside the API; with Redis: each `transformer worker`), each with its own
    # beam searches and threads / workers torch threads, as CTranslate2's inter_threads. Unset: one per thread on
    # the CPU (independent single-thread searches beat one search on every core), one on CUDA. benchmarks/README.
    workers: int | None = Field(default=None, ge=1)
    # The embedded queue's workers each in a child process of its own (service.queue.processes): a thread beside
    # the API's event loop shares its GIL, and takes turns with it and with the other workers at every one of a
    # step's small torch calls. Unset: on the CPU, not on CUDA (each process would hold its own weights there).
    worker_processes: bool | None = None
    # The decoding processes' memory allocator (service.allocator): "auto" loads tcmalloc, else jemalloc, when the
    # machine has one (Debian: libtcmalloc-minimal4, libjemalloc2), else keeps the system's malloc; on CUDA it
    # keeps the system's (worker_plan).
    allocator: Allocator = "auto"
    # continuous batching: what a worker's running beam searches hold at once
    max_batch_tokens: int = Field(default=4096, ge=1)  # source tokens, padding counted
    max_batch_size: int = Field(default=32, ge=1)  # texts
    # limits
    max_chars: int = Field(default=5000, ge=1, le=100_000)  # per text (le: the schema's own caps)
    max_texts: int = Field(default=64, ge=1, le=1000)  # per /translate or /summarize request
    max_job_texts: int = Field(default=10000, ge=1, le=100_000)  # per batch job
    max_sentences: int = Field(default=500, ge=1)  # per text, as model.segment cuts it
    max_beam_size: int = Field(default=8, ge=1)
    max_queue: int = Field(default=1000, ge=1)  # tasks queued or in flight before 429
    max_body_bytes: int = Field(default=4 * 1024 * 1024, ge=1024)  # any transfer encoding
    max_header_bytes: int = Field(default=64 * 1024, ge=1024)  # a request line and its headers (service.http)
    # A request's cost: for each text, beam_size x output limit x (source tokens + output limit), the
    # (query, key) pairs its decoder may attend over; it tracks worker time within a factor of about two.
    max_request_cost: int = Field(default=20_000_000, ge=1)  # per /translate, /summarize or /attention
    max_job_cost: int = Field(default=1_000_000_000, ge=1)  # per batch job
    max_attention_cells: int = Field(default=1_000_000, ge=1)  # attention weights one /attention may return
    max_result_bytes: int = Field(default=64 * 1024 * 1024, ge=1024)  # a larger result fails its task
    max_job_page: int = Field(default=1000, ge=1)  # most results per GET /jobs/{id}
    request_timeout_s: float = Field(default=60.0, gt=0)  # a synchronous request answers 504 after this
    # a request must arrive whole, headers and body, within this from its first byte (or from connecting), else
    # its connection is closed (service.http: uvicorn itself waits for slow senders without end)
    request_read_timeout_s: float = Field(default=60.0, gt=0)
    # an idle kept-alive connection is closed after this (uvicorn's timeout_keep_alive); behind a load balancer
    # that reuses its connections longer (AWS's ALB: 60 s), set it above the balancer's, or it meets closed ones
    keep_alive_s: float = Field(default=5.0, gt=0, le=3600)
    result_ttl_s: int = Field(default=3600, ge=1)  # how long job statuses and results are kept
    # files (POST /translate_file): each runs as a batch job; model.files reads them within these
    max_file_bytes: int = Field(default=10 * 1024 * 1024, ge=1024)
    max_file_unzipped_bytes: int = Field(default=100 * 1024 * 1024, ge=1024)  # .docx, .pptx, .odt, .epub unpacked
    max_file_entries: int = Field(default=10_000, ge=1)  # members of a zip-based file
    max_file_texts: int = Field(default=50_000, ge=1)  # paragraphs, lines or cues to translate
    # what one API key (without keys: all clients together) keeps at once: background jobs and files, queued,
    # running or ended and not yet read, deleted or expired; bytes are those sent (texts and files)
    max_kept_jobs: int = Field(default=100, ge=1)
    max_kept_bytes: int = Field(default=256 * 1024 * 1024, ge=1024)
    # FastAPI's own OpenTelemetry spans, metrics and logs; off by default: /metrics serves Prometheus, and
    # the check costs about a third of the API's CPU time per request even with no OpenTelemetry set up
    opentelemetry: bool = False
    log_format: Literal["text", "json"] = "text"  # json: one object a line, for log collectors
    # access
    api_keys: SecretStr = SecretStr("")  # "" = open; else comma-separated KEY or KEY:REQUESTS_PER_MINUTE
    rate_limit: int = Field(default=60, ge=0)  # requests per minute for a key without its own (0 = unlimited)
    auth_failures_per_minute: int = Field(default=10, ge=1)  # failed keys per client address before 429
    ops_need_key: bool = False  # /metrics, /docs, /redoc and /openapi.json need a key too
    allowed_hosts: str = ""  # "" = any Host header; else comma-separated host names (a "*." prefix matches subdomains)
    # browser pages on these origins may call the API (CORS): "" = none, "*" = any, else comma-separated origins
    # such as https://app.example.com (scheme, host and port: what a browser sends as Origin)
    cors_origins: str = ""
    # proxies whose X-Forwarded-For and X-Forwarded-Proto are believed (uvicorn's forwarded_allow_ips): a client's
    # address (wrong keys are throttled per address) and scheme (translatedFileUrl). Comma-separated addresses or
    # networks (10.0.0.0/8), "*" for any: a proxy in another container connects from its own address
    forwarded_allow_ips: str = "127.0.0.1,::1"
    # Redis queue
    queue_prefix: str = "transformer"
    claim_idle_ms: int = Field(default=30000, ge=100)  # a task in flight this long without a heartbeat is reclaimed
    max_deliveries: int = Field(default=3, ge=1)  # a task delivered more often than this fails
    worker_name: str = Field(default_factory=lambda: f"{socket.gethostname()}-{os.getpid()}")

    @field_validator("device")
    @classmethod
    def _device(cls, v: str) -> str:
        if not DEVICE_NAME.fullmatch(v):
            raise ValueError(f"device must be auto, cpu or cuda[:N], got {v!r}")
        return v

    @field_validator("dtype")
    @classmethod
    def _dtype(cls, v: str) -> str:
        if v not in DTYPE_NAMES:
            raise ValueError(f"dtype must be one of {', '.join(DTYPE_NAMES)}, got {v!r}")
        return v

    @model_validator(mode="after")
    def _keys(self) -> ServiceSettings:
        self.keys()  # parse once, so a bad TRANSFORMER_API_KEYS fails at start
        for i, origin in enumerate(self.origins()):
            if origin != "*" and not ORIGIN.fullmatch(origin):
                raise ValueError(
                    f"cors_origins: item {i + 1}, {origin[:100]!r}, is not an origin: give its scheme, host and "
                    "port if any, such as https://app.example.com or http://localhost:3000, or * for any"
                )
        proxies = self.proxies()
        for i, proxy in enumerate(proxies):
            try:
                if proxy != "*" or len(proxies) > 1:  # uvicorn reads "*" alone as any, beside others as a name
                    ipaddress.ip_network(proxy)  # an address is a network of one
            except ValueError:
                raise ValueError(
                    f"forwarded_allow_ips: item {i + 1}, {proxy[:100]!r}, is not an address or a network: give "
                    "addresses such as 172.18.0.5, networks such as 172.18.0.0/16, or * for any"
                ) from None
        if self.dtype == "int8" and self.device.startswith("cuda"):
            raise ValueError("dtype int8 runs on the CPU only: set device to cpu or auto, or dtype to bfloat16")
        return self

    def origins(self) -> list[str]:
        """The origins whose pages may call the API (CORS), "*" for any; empty: none."""
        return [o.rstrip("/") for o in listed(self.cors_origins)]

    def proxies(self) -> list[str]:
        """The addresses and networks of trusted proxies (forwarded_allow_ips), or ["*"] for any."""
        return listed(self.forwarded_allow_ips)

    def keys(self) -> dict[str, int]:
        """API key -> requests per minute (0 = unlimited)."""
        out: dict[str, int] = {}
        for i, item in enumerate(listed(self.api_keys.get_secret_value())):
            key, _, limit = item.partition(":")
            if not key or (limit and not limit.isdigit()):
                raise ValueError(f"api_keys: item {i + 1} is not KEY or KEY:REQUESTS_PER_MINUTE")
            if len(key) < MIN_KEY_LENGTH:  # short keys can be guessed; never echo a key back
                raise ValueError(
                    f"api_keys: key {i + 1} has {len(key)} characters; keys need at least {MIN_KEY_LENGTH}"
                )
            out[key] = int(limit) if limit else self.rate_limit
        return out

    def file_limits(self) -> FileLimits:
        return FileLimits(self.max_file_bytes, self.max_file_unzipped_bytes, self.max_file_entries, self.max_file_texts)

    def hosts(self) -> list[str]:
        """Allowed Host names, lower case; empty: any."""
        return [h.lower() for h in listed(self.allowed_hosts)]

    @property
    def resolved_device(self) -> str | None:
        return None if self.device == "auto" else self.device

    def worker_plan(self, beside_api: bool) -> WorkerPlan:
        """How many workers a process runs (beside_api: the embedded queue's, in the API's process), and the
        torch threads each has (workers)."""
        import torch

        from model.translator import default_device

        cuda = (self.resolved_device or default_device()).startswith("cuda")
        processes = beside_api and (not cuda if self.worker_processes is None else self.worker_processes)
        if cuda:  # the allocator's gain is the CPU's search steps: "auto" keeps the system's on CUDA
            allocator: Allocator = "system" if self.allocator == "auto" else self.allocator
            return WorkerPlan(self.workers or 1, self.threads, processes, allocator)
        threads = self.threads or torch.get_num_threads()
        workers = self.workers or (1 if beside_api and not processes else threads)
        return WorkerPlan(workers, max(1, threads // workers), processes, self.allocator)


@dataclass(frozen=True)
class WorkerPlan:
    """A process's workers (ServiceSettings.workers), each one's torch threads (None: torch's default),
    whether the embedded queue runs them in child processes (ServiceSettings.worker_processes), and the
    allocator their processes start with (ServiceSettings.allocator)."""

    workers: int
    threads: int | None
    processes: bool = False
    allocator: Allocator = "auto"


class SettingsError(Exception):
    """Settings that do not validate, each named by its environment variable."""


def env_name(field: str) -> str:
    return "REDIS_URL" if field == "redis_url" else f"TRANSFORMER_{field.upper()}"


def settings_error(e: ValidationError) -> SettingsError:
    """One line per invalid setting, naming its environment variable (the values are not echoed: keys)."""
    lines = []
    for err in e.errors(include_input=False):
        where = env_name(str(err["loc"][0])) if err["loc"] else "the settings"
        lines.append(f"{where}: {err['msg'].removeprefix('Value error, ')}")
    return SettingsError("; ".join(lines))
