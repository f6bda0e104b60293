"""A tiny client of the events API, for hosts that speak HTTP (and for the tests and demo).

    from tocsin.shell.client import TocsinClient

    with TocsinClient("https://tocsin.example", "tsk_...") as tocsin:
        tocsin.send_event({"product": "fraud", "type": "created",
                           "subject": {"kind": "case", "external_id": "C-1042"}},
                          idempotency_key="case-C-1042-created")
"""

from __future__ import annotations

from types import TracebackType
from typing import Any

import httpx

__all__ = ["TIMEOUT", "TocsinApiError", "TocsinClient"]

TIMEOUT = 30.0  # seconds for one request


class TocsinApiError(Exception):
    """The API refused or failed a request: ``status``, and the JSON ``body`` it answered
    (``body["problems"]`` lists each invalid path for a 422; ``retry_after`` is set for
    429 and 503)."""

    def __init__(self, status: int, body: dict[str, Any], retry_after: int | None = None) -> None:
        self.status = status
        self.body = body
        self.retry_after = retry_after
        super().__init__(f"{status} {body.get('error', 'error')}: {body.get('message', '')}")


class TocsinClient:
    def __init__(self, base_url: str, api_key: str, *, timeout: float = TIMEOUT,
                 transport: httpx.BaseTransport | None = None) -> None:
        self._http = httpx.Client(base_url=base_url.rstrip("/"), timeout=timeout, transport=transport,
                                  headers={"Authorization": f"Bearer {api_key}"})
        self.last_replayed = False  # whether the last answer was an idempotent replay

    def send_event(self, event: dict[str, Any], idempotency_key: str | None = None) -> dict[str, Any]:
        """Record one event: ``{"event_id": ..., "subject_id": ...}``."""
        return self._post("/api/v1/events", event, idempotency_key)

    def send_batch(self, events: list[dict[str, Any]], idempotency_key: str | None = None) -> dict[str, Any]:
        """Record up to 500 events, all or none: ``{"results": [{"event_id", "subject_id"}, ...]}``
        in the order given."""
        return self._post("/api/v1/events/batch", {"events": events}, idempotency_key)

    def _post(self, path: str, body: dict[str, Any], idempotency_key: str | None) -> dict[str, Any]:
        headers = {} if idempotency_key is None else {"Idempotency-Key": idempotency_key}
        response = self._http.post(path, json=body, headers=headers)
        try:
            answer = response.json()
        except ValueError:
            answer = {"error": "not_json", "message": response.text[:200]}
        if not isinstance(answer, dict):
            answer = {"error": "unexpected", "message": str(answer)[:200]}
        if response.status_code >= 400:
            retry = response.headers.get("Retry-After")
            raise TocsinApiError(response.status_code, answer,
                                 int(retry) if retry and retry.isdigit() else None)
        self.last_replayed = response.headers.get("Idempotent-Replayed") == "true"
        return answer

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> TocsinClient:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.close()
