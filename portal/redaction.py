"""Secret path segments kept out of every log line: an invitation or unsubscribe link's
token is enough to accept the invitation or unsubscribe its user, and access logs record
paths. Installed as the process's log-record factory, so it covers uvicorn's access log,
our own loggers and any handler added later, whatever formats the line."""

from __future__ import annotations

import logging
import re
import threading
from typing import Any

REDACTED = "[redacted]"
# The path segment after /invitations/ or /unsubscribe/ (also percent-encoded slashes).
SECRET_SEGMENT = re.compile(r"(/(?:invitations|unsubscribe)(?:/|%2f))[^/?#\s\"']+", re.IGNORECASE)

_lock = threading.Lock()
_installed = False


def redact(text: str) -> str:
    return SECRET_SEGMENT.sub(lambda m: m.group(1) + REDACTED, text)


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
