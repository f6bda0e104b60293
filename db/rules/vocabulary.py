"""What the rules console offers to pick for a product: the facts seen on its subjects
(stored fields, form answers, hierarchy levels) with the type of value they hold, the event
metadata keys its events carried, and recent subjects and events to preview and dry-run
against. Bounded: only the product's most recent subjects and events are looked at."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from db.platform.tenancy import TenantTx
from domain.rules.builder import FactChoice, subject_fact_choices

__all__ = [
    "CHOICES",
    "MAX_FACTS",
    "SAMPLE_EVENTS",
    "SAMPLE_SUBJECTS",
    "EventChoice",
    "SubjectChoice",
    "facts_seen",
    "recent_events",
    "recent_subjects",
]

SAMPLE_SUBJECTS = 2000  # most recent subjects of a product whose facts are looked at
SAMPLE_EVENTS = 500  # most recent events of a product whose metadata keys are looked at
MAX_FACTS = 400  # distinct facts offered per family
CHOICES = 50  # subjects and events offered to pick from

# Per fact name and JSON type, how many values and whether every string is a date.
_FACTS_SEEN = r"""
WITH recent AS (SELECT id FROM subjects WHERE product = %(product)s ORDER BY id DESC LIMIT %(sample)s),
seen AS (
    SELECT 'field.' || f.name AS fact, f.value FROM subject_fields f JOIN recent r ON r.id = f.subject_id
    UNION ALL
    SELECT 'form.' || a.form || '.' || a.field, a.value
    FROM subject_form_answers a JOIN recent r ON r.id = a.subject_id
    UNION ALL
    SELECT 'hierarchy.' || h.level, to_jsonb(''::text)
    FROM subject_hierarchy h JOIN recent r ON r.id = h.subject_id
)
SELECT fact, jsonb_typeof(value) AS type, count(*),
       bool_and(jsonb_typeof(value) <> 'string' OR value #>> '{}' ~ '^\d{4}-\d{2}-\d{2}$')
FROM seen
GROUP BY fact, type
ORDER BY fact
LIMIT %(limit)s
"""

_METADATA_SEEN = """
SELECT DISTINCT k FROM (SELECT metadata FROM events WHERE product = %(product)s
                        ORDER BY id DESC LIMIT %(sample)s) e,
     jsonb_object_keys(e.metadata) AS k
ORDER BY k LIMIT %(limit)s
"""


def _fact_type(counts: dict[str, tuple[int, bool]]) -> str | None:
    """The type a fact's values mostly have: number, boolean, list, date, string."""
    typed = {t: c for t, c in counts.items() if t != "null"}
    if not typed:
        return None
    top = max(typed, key=lambda t: typed[t][0])
    if top == "string":
        return "date" if typed[top][1] else "string"
    return {"number": "number", "boolean": "boolean", "array": "list"}.get(top)


def facts_seen(tx: TenantTx, product: str) -> list[FactChoice]:
    """Every fact a condition of the product's rules may name, with its type where known:
    the subject row's own facts, those stored on its recent subjects, and event metadata."""
    rows = tx.conn.execute(_FACTS_SEEN, {"product": product, "sample": SAMPLE_SUBJECTS,
                                         "limit": 4 * MAX_FACTS}).fetchall()
    by_fact: dict[str, dict[str, tuple[int, bool]]] = {}
    for fact, kind, count, dates in rows:
        by_fact.setdefault(str(fact), {})[str(kind)] = (int(str(count)), bool(dates))
    stored = [FactChoice(name, _fact_type(types)) for name, types in by_fact.items()]
    keys = tx.conn.execute(_METADATA_SEEN, {"product": product, "sample": SAMPLE_EVENTS,
                                            "limit": MAX_FACTS}).fetchall()
    events = [FactChoice(f"event.{k[0]}", "string") for k in keys]
    return [*subject_fact_choices(), *stored, *events]


@dataclass(frozen=True)
class SubjectChoice:
    id: int
    kind: str
    external_id: str
    title: str
    status: str

    @property
    def label(self) -> str:
        title = f" · {self.title}" if self.title else ""
        return f"{self.kind} {self.external_id}{title} ({self.status})"


@dataclass(frozen=True)
class EventChoice:
    id: int
    subject_id: int
    event_type: str
    trigger_type: str | None
    occurred_at: datetime
    subject_label: str

    @property
    def label(self) -> str:
        what = self.trigger_type or self.event_type
        return (f"#{self.id} {what.replace('_', ' ')} · {self.subject_label} · "
                f"{self.occurred_at:%Y-%m-%d %H:%M} UTC")


def recent_subjects(tx: TenantTx, product: str) -> list[SubjectChoice]:
    rows = tx.conn.execute(
        "SELECT id, kind, external_id, title, status FROM subjects WHERE product = %s "
        "ORDER BY updated_at DESC, id DESC LIMIT %s", [product, CHOICES]).fetchall()
    return [SubjectChoice(int(str(r[0])), str(r[1]), str(r[2]), str(r[3]), str(r[4])) for r in rows]


def recent_events(tx: TenantTx, product: str) -> list[EventChoice]:
    rows = tx.conn.execute(
        "SELECT e.id, e.subject_id, e.event_type, e.trigger_type, e.occurred_at, "
        "       s.kind || ' ' || s.external_id "
        "FROM events e JOIN subjects s ON s.id = e.subject_id WHERE e.product = %s "
        "ORDER BY e.id DESC LIMIT %s", [product, CHOICES]).fetchall()
    return [EventChoice(int(str(r[0])), int(str(r[1])), str(r[2]), None if r[3] is None else str(r[3]),
                        r[4], str(r[5])) for r in rows]  # type: ignore[arg-type]
