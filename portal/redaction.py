"""Secrets kept out of every log line: an invitation or unsubscribe link's token is enough
to accept the invitation or unsubscribe its user, and an API key sent as `?api_key=` (which
the events API refuses, but only after the access log has the URL) is enough to send events
as its tenant; access logs record paths and query strings. Installed as the process's
log-record factory, so it covers uvicorn's access log, our own loggers and any handler
added later, whatever formats the line."""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Iterable
from typing import Any

__all__ = [
    "REDACTED",
    "SECRET_PARAMETER",
    "SECRET_QUERY_NAMES",
    "SECRET_SEGMENT",
    "install_log_redaction",
    "redact",
    "redact_record",
    "secret_query_names",
]

REDACTED = "[redacted]"
# The path segment after /invitations/ or /unsubscribe/ (also percent-encoded slashes).
SECRET_SEGMENT = re.compile(r"(/(?:invitations|unsubscribe)(?:/|%2f))[^/?#\s\"']+", re.IGNORECASE)
# Query parameters that carry a credential, by name (any case; `_` also percent-encoded).
SECRET_QUERY_NAMES = ("api_key", "apikey", "api-key", "key", "token", "access_token")
_NAME = r"(?:api(?:_|%5f|-)?key|key|(?:access(?:_|%5f))?token)"
# The value of such a parameter: after ? or & (also &amp; in HTML, and percent-encoded).
SECRET_PARAMETER = re.compile(rf"((?:[?&]|&amp;|%3f|%26){_NAME}(?:=|%3d))[^&#\s\"']*", re.IGNORECASE)

_lock = threading.Lock()
_installed = False


def redact(text: str) -> str:
    text = SECRET_SEGMENT.sub(lambda m: m.group(1) + REDACTED, text)
    return SECRET_PARAMETER.sub(lambda m: m.group(1) + REDACTED, text)


def secret_query_names(names: Iterable[str]) -> list[str]:
    """The query parameters among these (decoded) names that carry a credential."""
    return [n for n in names if n.lower() in SECRET_QUERY_NAMES]


def _redacted(value: Any) -> Any:
    return redact(value) if isinstance(value, str) else value


def redact_record(record: logging.LogRecord) -> logging.LogRecord:
    if isinstance(record.msg, str):
        record.msg = redact(record.msg)
    if isinstance(record.args, tuple):
        record.args = tuple(_redacted(a) for a in record.args)
    elif isinstance(record.args, dict):
        record.args = {k: _redacted(v) for k, v in record.args.items()}
    return record


def install_log_redaction() -> None:
    """Idempotent: wrap the current log-record factory once per process."""
    global _installed
    with _lock:
        if _installed:
            return
        make_record = logging.getLogRecordFactory()

        def redacting_factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
            return redact_record(make_record(*args, **kwargs))

        logging.setLogRecordFactory(redacting_factory)
        _installed = True
