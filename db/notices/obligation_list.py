"""The obligations a tenant watches, for the obligations page and its CSV: every subject
whose date fact an enabled due-date time rule watches, with the due date, the subject's
local today, what the ledger recorded for that due date, the next notice and the local date
it will be sent on (domain/rules/obligation_schedule.py), and whether the rule's conditions hold
now ("while this still holds": a closed subject is not reminded). And one subject's page:
its obligations and every notice ever claimed about it, with each delivery.

One statement lists the obligations of all rules at once (the watched rules are passed as
arrays); the due date is read with iso_date_or_null, as the scan reads it, so the page and
the scan agree on which values are dates.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import date, datetime
from typing import Any

from db.events.facts import load_facts_of_subjects
from db.platform.tenancy import TenantTx
from db.rules.calendar import load_calendar
from db.rules.time_rules import time_rules
from domain.csv_export import csv_rows
from domain.errors import InvalidInput, NotFound
from domain.rules.conditions import Facts, WantedFacts, evaluate
from domain.rules.definitions import RuleDefinition
from domain.rules.obligation_dates import Calendar
from domain.rules.obligation_schedule import Schedule, schedule

__all__ = [
    "CSV_FIELDS",
    "FILTER_MAX_LENGTH",
    "MAX_WITHIN_DAYS",
    "PAGE_SIZE",
    "SHOWN_MAX",
    "Cursor",
    "Notice",
    "Obligation",
    "ObligationFilter",
    "Subject",
    "csv_lines",
    "csv_values",
    "get_subject",
    "iter_obligations",
    "obligations_page",
    "products_and_statuses",
    "subject_notices",
    "subject_obligations",
]

PAGE_SIZE = 50  # obligations per page
MAX_WITHIN_DAYS = 3660  # days: the "due within" filter's upper bound (ten years)
FILTER_MAX_LENGTH = 100  # characters of a product or status filter


@dataclass(frozen=True)
class ObligationFilter:
    """What a reader narrowed the list to. ``within_days`` keeps due dates from the
    subject's today to N days on; ``overdue`` those before it; both together, either."""

    product: str | None = None
    status: str | None = None
    within_days: int | None = None
    overdue: bool = False

    def __post_init__(self) -> None:
        for name in ("product", "status"):
            value = getattr(self, name)
            if value is not None and len(value) > FILTER_MAX_LENGTH:
                raise InvalidInput(f"the {name} filter is longer than {FILTER_MAX_LENGTH} characters")
        if self.within_days is not None and not 0 <= self.within_days <= MAX_WITHIN_DAYS:
            raise InvalidInput(f"'due within' takes a number of days from 0 to {MAX_WITHIN_DAYS}")

    def where(self) -> tuple[str, dict[str, object]]:
        clauses, params = ["TRUE"], dict[str, object]()
        if self.product:
            clauses.append("o.product = %(product)s")
            params["product"] = self.product
        if self.status:
            clauses.append("o.status = %(status)s")
            params["status"] = self.status
        window = []
        if self.within_days is not None:
            window.append("o.due_on BETWEEN o.today AND o.today + %(within)s::int")
            params["within"] = self.within_days
        if self.overdue:
            window.append("o.due_on < o.today")
        if window:
            clauses.append("(" + " OR ".join(window) + ")")
        return " AND ".join(clauses), params


@dataclass(frozen=True)
class Cursor:
    """Where the next page starts (the list is ordered by due date, subject, rule)."""

    due_on: date
    subject_id: int
    rule_id: int


@dataclass(frozen=True)
class Obligation:
    rule_id: int
    rule_name: str
    rule_version: int
    product: str
    subject_id: int
    subject_kind: str
    external_id: str
    title: str
    subject_status: str
    zone: str
    due_on: date
    offsets: tuple[int, ...]
    business_days: bool
    schedule: Schedule
    notices: int  # claimed for this due date
    delivered: int
    acknowledged: int
    last_claimed_at: datetime | None
    holds: bool = True  # the rule's conditions hold now (else the scan sends nothing)
    paused_by: str = ""  # the first condition that does not hold, in words


@dataclass(frozen=True)
class _Watch:
    """An enabled due-date rule, flattened for the query."""

    rule_id: int
    name: str
    version: int
    product: str
    definition: RuleDefinition
    field: str
    offsets: tuple[int, ...]
    business_days: bool


def _watched(tx: TenantTx) -> dict[int, _Watch]:
    """The enabled time rules that watch a due date (the scan's own list; turnaround rules
    have no due date to show)."""
    out = {}
    for rule in time_rules(tx):
        due = rule.definition.trigger.due
        if due is not None:
            out[rule.id] = _Watch(rule.id, rule.definition.name, rule.version, rule.product,
                                  rule.definition, due.field, due.offsets, due.business_days)
    return out


_OBLIGATIONS = """
WITH w AS (
    SELECT * FROM unnest(%(rule_ids)s::bigint[], %(products)s::text[], %(kinds)s::text[],
                         %(fields)s::text[]) AS w (rule_id, product, subject_kind, field)
), o AS (
    SELECT w.rule_id, s.id AS subject_id, s.product, s.kind, s.external_id, s.title, s.status,
           coalesce(s.time_zone, %(zone)s) AS zone,
           (%(as_of)s::timestamptz AT TIME ZONE coalesce(s.time_zone, %(zone)s))::date AS today,
           iso_date_or_null(f.value #>> '{}') AS due_on
    FROM w
    JOIN subjects s ON s.product = w.product AND (w.subject_kind IS NULL OR s.kind = w.subject_kind)
    JOIN subject_fields f ON f.subject_id = s.id AND f.name = w.field
                         AND jsonb_typeof(f.value) = 'string'
    WHERE s.id = ANY(%(subject_ids)s::bigint[]) OR %(subject_ids)s::bigint[] IS NULL
), p AS (
    SELECT * FROM o WHERE o.due_on IS NOT NULL AND {where}
    ORDER BY o.due_on, o.subject_id, o.rule_id {limit}
)
"""
# What the ledger holds for each listed due date: read after filtering and paging, so a page
# costs one ledger probe per row shown, not one per obligation of the tenant.
_WITH_LEDGER = """
SELECT p.rule_id, p.subject_id, p.product, p.kind, p.external_id, p.title, p.status, p.zone,
       p.today, p.due_on, coalesce(led.recorded, '{}'), coalesce(led.claimed, 0),
       coalesce(led.delivered, 0), coalesce(led.acknowledged, 0), led.last_claimed_at
FROM p
LEFT JOIN LATERAL (
    SELECT jsonb_object_agg(l.threshold, l.status) AS recorded,
           count(*) FILTER (WHERE l.status = 'claimed') AS claimed,
           count(l.delivered_at) AS delivered, count(l.acknowledged_at) AS acknowledged,
           max(l.claimed_at) FILTER (WHERE l.status = 'claimed') AS last_claimed_at
    FROM notification_ledger l
    WHERE l.rule = 'rule:' || p.rule_id AND l.subject_kind = 'subject'
      AND l.subject_id = p.subject_id AND l.due_on = p.due_on
) led ON TRUE
ORDER BY p.due_on, p.subject_id, p.rule_id
"""


def _statement(where: str, *, limited: bool = False) -> str:
    """The listing: ``where`` is SQL over the obligation ``o`` built by ObligationFilter
    (its values are parameters, never text)."""
    return (_OBLIGATIONS + _WITH_LEDGER).replace("{where}", where).replace(
        "{limit}", "LIMIT %(limit)s" if limited else "")


def _params(tx: TenantTx, watched: dict[int, _Watch], as_of: datetime,
            subject_ids: list[int] | None = None) -> dict[str, object]:
    ws = list(watched.values())
    return {"rule_ids": [w.rule_id for w in ws], "products": [w.product for w in ws],
            "kinds": [w.definition.trigger.subject_kind for w in ws],
            "fields": [w.field for w in ws], "zone": tx.tenant.time_zone, "as_of": as_of,
            "subject_ids": subject_ids}


def _obligation(row: Sequence[Any], watched: dict[int, _Watch], cal: Calendar) -> Obligation:
    (rule_id, subject_id, product, kind, external_id, title, status, zone, today, due_on,
     recorded, claimed, delivered, acknowledged, last_claimed_at) = row
    w = watched[int(rule_id)]
    return Obligation(
        rule_id=w.rule_id, rule_name=w.name, rule_version=w.version, product=str(product),
        subject_id=int(subject_id), subject_kind=str(kind), external_id=str(external_id),
        title=str(title), subject_status=str(status), zone=str(zone), due_on=due_on,
        offsets=w.offsets, business_days=w.business_days,
        schedule=schedule(due_on, w.offsets, w.business_days, cal, today, dict(recorded)),
        notices=int(claimed), delivered=int(delivered), acknowledged=int(acknowledged),
        last_claimed_at=last_claimed_at)


def _subject_facts(tx: TenantTx, subject_ids: list[int]) -> dict[int, dict[str, object]]:
    """The subject row's facts (subject.status, subject.assignees, ...) the rules read."""
    rows = tx.conn.execute(
        """
        SELECT s.id, s.kind, s.external_id, s.title, s.status,
               coalesce((SELECT array_agg(lower(u.email) ORDER BY lower(u.email))
                         FROM subject_assignees a JOIN users u ON u.id = a.user_id
                         WHERE a.subject_id = s.id), '{}')
        FROM subjects s WHERE s.id = ANY(%s)
        """, [subject_ids]).fetchall()
    return {int(str(r[0])): {"subject.kind": r[1], "subject.external_id": r[2], "subject.title": r[3],
                             "subject.status": r[4], "subject.assignees": list(r[5])}  # type: ignore[call-overload]
            for r in rows}


def _judged(tx: TenantTx, obligations: list[Obligation], watched: dict[int, _Watch]) -> list[Obligation]:
    """Each obligation with whether its rule's conditions hold now, loading only the fact
    families the rules on the page read (one query per family for the whole page)."""
    if not obligations:
        return obligations
    subject_ids = sorted({o.subject_id for o in obligations})
    wanted: dict[int, WantedFacts] = {}
    for o in obligations:
        need = watched[o.rule_id].definition.condition_facts()
        wanted[o.subject_id] = wanted.get(o.subject_id, WantedFacts()).union(need)
    stored = load_facts_of_subjects(tx, {s: w for s, w in wanted.items() if w})
    row_facts = _subject_facts(tx, subject_ids)
    out = []
    for o in obligations:
        facts = {**row_facts.get(o.subject_id, {}), **stored.get(o.subject_id, {})}
        try:
            holds, trace = evaluate(watched[o.rule_id].definition.conditions, Facts(facts))
        except Exception as error:  # this subject's facts: the rest of the page is judged all the same
            out.append(replace(o, holds=False, paused_by=f"its conditions could not be evaluated "
                                                         f"({type(error).__name__})"))
            continue
        failing = next((t for t in trace if not t.result), None)
        why = "" if holds or failing is None else \
            f"{failing.fact} {failing.op.replace('_', ' ')} {failing.expected!r}" + \
            (" (missing)" if failing.missing else f" (is {_shown(failing.seen)})")
        out.append(replace(o, holds=holds, paused_by=why))
    return out


SHOWN_MAX = 80  # characters of a value seen, in words on the page


def _shown(value: object) -> str:
    """A value seen, as the page shows it: a long one (an amount of 400 digits, a text) cut."""
    try:
        text = repr(value)
    except ValueError:  # an integer past Python's 4,300 digits of repr
        return "a number too long to show"
    return text if len(text) <= SHOWN_MAX else text[:SHOWN_MAX] + "…"


def obligations_page(tx: TenantTx, filters: ObligationFilter, as_of: datetime,
                     after: Cursor | None = None, limit: int = PAGE_SIZE
                     ) -> tuple[list[Obligation], Cursor | None]:
    """One page of obligations, soonest due date first (overdue ones lead)."""
    watched = _watched(tx)
    if not watched:
        return [], None
    where, params = filters.where()
    if after is not None:
        where += " AND (o.due_on, o.subject_id, o.rule_id) > (%(a_due)s, %(a_subject)s, %(a_rule)s)"
        params |= {"a_due": after.due_on, "a_subject": after.subject_id, "a_rule": after.rule_id}
    params |= _params(tx, watched, as_of) | {"limit": limit + 1}
    rows = tx.conn.execute(_statement(where, limited=True), params).fetchall()
    cal = load_calendar(tx)
    page = _judged(tx, [_obligation(r, watched, cal) for r in rows[:limit]], watched)
    more = Cursor(page[-1].due_on, page[-1].subject_id, page[-1].rule_id) if len(rows) > limit else None
    return page, more


def iter_obligations(tx: TenantTx, filters: ObligationFilter, as_of: datetime,
                     batch_size: int = 500) -> Iterator[Obligation]:
    """Every filtered obligation, from a server-side cursor, judged a batch at a time:
    memory stays at one batch whatever the count."""
    watched = _watched(tx)
    if not watched:
        return
    cal = load_calendar(tx)
    where, params = filters.where()
    params |= _params(tx, watched, as_of)
    with tx.conn.cursor(name="obligations_export") as cursor:
        cursor.itersize = batch_size
        cursor.execute(_statement(where), params)
        while rows := cursor.fetchmany(batch_size):
            yield from _judged(tx, [_obligation(r, watched, cal) for r in rows], watched)


def products_and_statuses(tx: TenantTx) -> tuple[list[tuple[str, str]], list[str]]:
    """For the filters: the tenant's products (code, name) and the subject statuses seen."""
    products = [(str(r[0]), str(r[1])) for r in
                tx.conn.execute("SELECT code, name FROM products ORDER BY name").fetchall()]
    statuses = [str(r[0]) for r in tx.conn.execute(
        "SELECT DISTINCT status FROM subjects ORDER BY status LIMIT 100").fetchall()]
    return products, statuses


# --- one subject --------------------------------------------------------------------------


@dataclass(frozen=True)
class Subject:
    id: int
    product: str
    product_name: str
    kind: str
    external_id: str
    title: str
    status: str
    zone: str
    zone_is_own: bool  # the subject's own zone (its site's), not the tenant's default
    created_at: datetime
    assignees: list[str] = field(default_factory=list)
    hierarchy: list[tuple[str, str]] = field(default_factory=list)  # (level, unit name)


@dataclass(frozen=True)
class Notice:
    """One ledger row about the subject: a time rule's milestone or an event rule's notice."""

    id: int
    rule_id: int | None
    rule_name: str | None
    rule_version: int | None
    threshold: str
    due_on: date
    status: str
    status_reason: str | None
    claimed_at: datetime
    delivered_at: datetime | None
    acknowledged_at: datetime | None
    acknowledged_by: str | None
    recipients: int  # inbox rows written for it
    read: int  # of those, read


def get_subject(tx: TenantTx, subject_id: int) -> Subject:
    row = tx.conn.execute(
        """
        SELECT s.id, s.product, p.name, s.kind, s.external_id, s.title, s.status,
               coalesce(s.time_zone, %(zone)s), s.time_zone IS NOT NULL, s.created_at,
               coalesce((SELECT array_agg(coalesce(nullif(u.display_name, ''), u.email) ORDER BY u.email)
                         FROM subject_assignees a JOIN users u ON u.id = a.user_id
                         WHERE a.subject_id = s.id), '{}'),
               coalesce((SELECT array_agg(array[h.level, u.name] ORDER BY h.level)
                         FROM subject_hierarchy h JOIN hierarchy_units u ON u.id = h.unit_id
                         WHERE h.subject_id = s.id), '{}')
        FROM subjects s JOIN products p ON p.code = s.product
        WHERE s.id = %(id)s
        """, {"id": subject_id, "zone": tx.tenant.time_zone}).fetchone()
    if row is None:
        raise NotFound(f"there is no subject {subject_id}")
    assignees: list[str] = row[10]  # type: ignore[assignment]
    units: list[list[str]] = row[11]  # type: ignore[assignment]
    return Subject(int(str(row[0])), str(row[1]), str(row[2]), str(row[3]), str(row[4]), str(row[5]),
                   str(row[6]), str(row[7]), bool(row[8]), row[9],  # type: ignore[arg-type]
                   list(assignees), [(str(u[0]), str(u[1])) for u in units])


def subject_obligations(tx: TenantTx, subject_id: int, as_of: datetime) -> list[Obligation]:
    """The subject's obligations under every enabled due-date rule that watches it."""
    watched = _watched(tx)
    if not watched:
        return []
    params = _params(tx, watched, as_of, [subject_id])
    rows = tx.conn.execute(_statement("TRUE"), params).fetchall()
    cal = load_calendar(tx)
    return _judged(tx, [_obligation(r, watched, cal) for r in rows], watched)


def subject_notices(tx: TenantTx, subject_id: int, limit: int = 500) -> list[Notice]:
    """Every notice claimed (or skipped, or cancelled) about the subject, newest first."""
    rows = tx.conn.execute(
        """
        SELECT l.id, l.rule_id, r.name, l.rule_version, l.threshold, l.due_on, l.status,
               l.status_reason, l.claimed_at, l.delivered_at, l.acknowledged_at, ack.email,
               coalesce(n.recipients, 0), coalesce(n.read, 0)
        FROM notification_ledger l
        LEFT JOIN rules r ON r.id = l.rule_id
        LEFT JOIN users ack ON ack.id = l.acknowledged_by
        LEFT JOIN LATERAL (
            SELECT count(*) AS recipients, count(n.read_at) AS read
            FROM notifications n WHERE n.ledger_id = l.id
        ) n ON TRUE
        WHERE l.subject_kind = 'subject' AND l.subject_id = %s
        ORDER BY l.claimed_at DESC, l.id DESC
        LIMIT %s
        """, [subject_id, limit]).fetchall()
    return [Notice(int(str(r[0])), None if r[1] is None else int(str(r[1])), r[2],  # type: ignore[arg-type]
                   None if r[3] is None else int(str(r[3])), str(r[4]), r[5], str(r[6]), r[7],  # type: ignore[arg-type]
                   r[8], r[9], r[10], r[11], int(str(r[12])), int(str(r[13])))  # type: ignore[arg-type]
            for r in rows]


# --- the CSV export -----------------------------------------------------------------------

CSV_FIELDS = (
    "product", "subject_id", "subject_kind", "external_id", "title", "subject_status", "time_zone",
    "rule_id", "rule_name", "due_on", "days_left", "overdue", "watching", "paused_by",
    "next_milestone", "next_notice_on", "next_state", "notices_claimed", "notices_delivered",
    "notices_acknowledged", "last_claimed_at",
)


def csv_values(o: Obligation) -> tuple[object, ...]:
    """One obligation as a CSV row, in CSV_FIELDS order; dates are the subject's local ones."""
    step = o.schedule.next
    return (
        o.product, o.subject_id, o.subject_kind, o.external_id, o.title, o.subject_status, o.zone,
        o.rule_id, o.rule_name, o.due_on, o.schedule.days_left, o.schedule.overdue, o.holds,
        o.paused_by, None if step is None else step.milestone.threshold,
        None if step is None else step.milestone.starts, None if step is None else step.state,
        o.notices, o.delivered, o.acknowledged, o.last_claimed_at,
    )


def csv_lines(obligations: Iterable[Obligation]) -> Iterator[str]:
    return csv_rows(CSV_FIELDS, (csv_values(o) for o in obligations))
