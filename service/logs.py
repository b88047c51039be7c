"""Logging for `transformer serve`, `worker` and `demo`: one handler on stderr for our loggers and uvicorn's,
every line carrying the request id it was written under (X-Request-Id), as text or as one JSON object a line
(TRANSFORMER_LOG_FORMAT=json)."""

from __future__ import annotations

import json
import logging
import logging.config
import random
import re
from contextvars import ContextVar
from typing import Any, Literal

LogFormat = Literal["text", "json"]
REQUEST_ID: ContextVar[str] = ContextVar("request_id", default="-")
GOOD_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")  # a client's X-Request-Id is taken when it looks like an id
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s [%(request_id)s]: %(message)s"


def request_id(given: str | None) -> str:
    """The client's X-Request-Id when it is a plain id of at most 128 characters, else a new one."""
    if given is not None and GOOD_ID.fullmatch(given):
        return given
    # 128 random bits as 32 hex digits, as uuid4().hex, without a system call per request: an id, not a secret
    return f"{random.getrandbits(128):032x}"


class RequestIdFilter(logging.Filter):
    """Adds the current request's id (or "-") to every record as `request_id`."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = REQUEST_ID.get()
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object a line: time, level, logger, request_id, message (and the exception, if any)."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": self.formatTime(record),
            "level": record.levelname,
            "logger": record.name,
            "request_id": getattr(record, "request_id", "-"),
            "message": record.getMessage(),
        }
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False)


def configure_logging(fmt: LogFormat, level: str = "INFO", access: bool = True) -> None:
    """Our loggers and uvicorn's through one stderr handler in the given format (access: a line per request);
    call before uvicorn.run with log_config=None, so that uvicorn keeps it."""
    formatter: dict[str, Any] = {"()": JsonFormatter} if fmt == "json" else {"format": TEXT_FORMAT}
    logging.config.dictConfig(
        {
            "version": 1,
            "disable_existing_loggers": False,
            "filters": {"request_id": {"()": RequestIdFilter}},
            "formatters": {"main": formatter},
            "handlers": {
                "stderr": {
                    "class": "logging.StreamHandler",
                    "stream": "ext://sys.stderr",
                    "formatter": "main",
                    "filters": ["request_id"],
                }
            },
            "root": {"handlers": ["stderr"], "level": level},
            "loggers": {
                "uvicorn": {"handlers": [], "propagate": True, "level": level},
                "uvicorn.error": {"handlers": [], "propagate": True, "level": level},
                "uvicorn.access": {"handlers": [], "propagate": True, "level": level if access else "WARNING"},
            },
        }
    )
