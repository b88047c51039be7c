"""Service settings, read from the environment (prefix TRANSFORMER_, and REDIS_URL) when built, never at import."""

from __future__ import annotations

import os
import socket
from pathlib import Path

from pydantic import AliasChoices, Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class ServiceSettings(BaseSettings):
    """Everything the API and the workers read; every field is an environment variable (see README)."""

    model_config = SettingsConfigDict(env_prefix="TRANSFORMER_", frozen=True, extra="ignore", validate_by_name=True)

    models_dir: Path = Path("models")  # every subdirectory holding a config.json is a model
    redis_url: str | None = Field(default=None, validation_alias=AliasChoices("REDIS_URL", "TRANSFORMER_REDIS_URL"))
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=1, le=65535)
    device: str = "auto"  # "auto": CUDA when available, else the CPU
    dtype: str = "auto"  # "auto": float32 on the CPU, bfloat16 on CUDA
    threads: int | None = Field(default=None, ge=1)
    # dynamic batching
    max_batch_tokens: int = Field(default=4096, ge=1)  # source tokens per batch, padding counted
    max_batch_size: int = Field(default=32, ge=1)  # sentences per batch
    max_wait_ms: float = Field(default=10.0, ge=0)  # how long a batch waits to fill once one request is in
    # limits
    max_chars: int = Field(default=5000, ge=1)  # per text
    max_texts: int = Field(default=64, ge=1)  # per /translate or /summarize request
    max_job_texts: int = Field(default=10000, ge=1)  # per batch job
    max_beam_size: int = Field(default=8, ge=1)
    max_queue: int = Field(default=1000, ge=1)  # tasks queued or in flight before 429
    max_body_bytes: int = Field(default=16 * 1024 * 1024, ge=1024)
    request_timeout_s: float = Field(default=60.0, gt=0)  # a synchronous request answers 504 after this
    result_ttl_s: int = Field(default=3600, ge=1)  # how long job statuses and results are kept
    # FastAPI's own OpenTelemetry spans, metrics and logs; off by default: /metrics serves Prometheus, and
    # the check costs about a third of the API's CPU time per request even with no OpenTelemetry set up
    opentelemetry: bool = False
    # access
    api_keys: str = ""  # "" = open; else comma-separated KEY or KEY:REQUESTS_PER_MINUTE
    rate_limit: int = Field(default=60, ge=0)  # requests per minute for a key without its own (0 = unlimited)
    # Redis queue
    queue_prefix: str = "transformer"
    claim_idle_ms: int = Field(default=30000, ge=100)  # a task in flight this long without a heartbeat is reclaimed
    max_deliveries: int = Field(default=3, ge=1)  # a task delivered more often than this fails
    worker_name: str = Field(default_factory=lambda: f"{socket.gethostname()}-{os.getpid()}")

    @field_validator("device")
    @classmethod
    def _device(cls, v: str) -> str:
        if v != "auto" and not (v == "cpu" or v.startswith("cuda")):
            raise ValueError(f"device must be auto, cpu or cuda[:N], got {v!r}")
        return v

    @field_validator("dtype")
    @classmethod
    def _dtype(cls, v: str) -> str:
        if v not in ("auto", "float32", "bfloat16", "float16"):
            raise ValueError(f"dtype must be auto, float32, bfloat16 or float16, got {v!r}")
        return v

    @model_validator(mode="after")
    def _keys(self) -> ServiceSettings:
        self.keys()  # parse once, so a bad TRANSFORMER_API_KEYS fails at start
        return self

    def keys(self) -> dict[str, int]:
        """API key -> requests per minute (0 = unlimited)."""
        out: dict[str, int] = {}
        for item in filter(None, (s.strip() for s in self.api_keys.split(","))):
            key, _, limit = item.partition(":")
            if not key or (limit and not limit.isdigit()):
                raise ValueError(f"api_keys: {item!r} is not KEY or KEY:REQUESTS_PER_MINUTE")
            out[key] = int(limit) if limit else self.rate_limit
        return out

    @property
    def resolved_device(self) -> str | None:
        return None if self.device == "auto" else self.device
