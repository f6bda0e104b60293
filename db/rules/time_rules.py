"""The clock's scan of time-trigger rules: obligations (offsets around a due date) and
turnaround breaches, claimed set-based per tenant beside the licence scan (db/notices/licence_scan.py).

Every statement here may run twice, or eight times at once, for the same tenant and
instant: the ledger's unique key (rule 'rule:<id>', 'subject', subject, threshold, due
date) decides who wins, losers skip. Rows are inserted and locked in one fixed key order
(subject, threshold, due date; ledger ids when cancelling), so concurrent scans wait for
each other instead of deadlocking.

Due-date rules: one INSERT … SELECT … ON CONFLICT DO NOTHING per rule. The windows go in
as parameters (domain/rules/obligation_dates.py window_bounds: for each local today a zone can have
at the scan's instant and each offset, the latest due date whose window has begun and the
latest whose window has passed), so business days cost nothing in SQL; each subject's local
today is computed once; one ledger key is probed per subject (its latest begun
window: one statement writes every begun window of a subject at once). Conditions compile
to SQL (db/rules/condition_sql.py); when a tree cannot be said in SQL exactly, the statement only
selects the candidates, the tree is evaluated in Python with targeted loading, and a second
statement claims the survivors.

Turnaround rules: the subjects whose timestamp is old enough (read through the product,
status and timestamp indexes of migration 0011 when the condition names the status, as it
usually does: the open subjects, not the years of closed ones) and whose occurrence is not
yet claimed, their breach instant computed by the domain (one source of truth for hours,
local days and working days), then one claim for those in breach.

Each claim names the rule version the scan applied, read in the claiming statement itself:
a rule edited after the scan read it claims nothing in this scan (the version no longer
matches), and the next scan applies the new version; the ledger key has no version, so an
edit can never make a notice claimed twice.

A due date moved (the field now holds another date) or removed: the old date's claims that
are still waiting (not prepared, or with an email not yet sent) are cancelled with the
reason, their waiting emails cancelled and their unread inbox rows archived
(db/rules/moved_due_dates.py); the new date is a new occurrence and its cycle is claimed
normally. The subject register cancels them in the transaction that writes the field; the
scan cancels them again for a host that writes subject_fields by the table contract.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg.rows import tuple_row

from db.events.facts import load_facts_of_subjects
from db.platform.effects import PrepareClaims
from db.platform.tenancy import TenantTx
from db.rules.calendar import load_calendar
from db.rules.condition_sql import CompiledConditions, compile_conditions
from db.rules.moved_due_dates import cancel_moved_due_dates
from domain.rules.conditions import Facts, evaluate
from domain.rules.definitions import RuleDefinition, stored_rule
from domain.rules.obligation_dates import (
    SKIPPED_REASON,
    Calendar,
    breach_at,
    local_date,
    possible_todays,
    turnaround_threshold,
    window_bounds,
)

__all__ = ["SUBJECT_KIND", "TimeClaimCounts", "TimeRule", "claim_time_rules", "time_rules"]

SUBJECT_KIND = "subject"
_TIMESTAMPS = {"created": "created_at", "assigned": "assigned_at", "status_changed": "status_changed_at"}


@dataclass(frozen=True)
class TimeClaimCounts:
    claimed: int = 0  # ledger rows claimed (to be prepared and sent)
    skipped: int = 0  # ledger rows recorded as skipped (their window had passed)
    cancelled: int = 0  # waiting claims cancelled because their due date moved or was removed
    # What failed alone, in words: a rule whose claims were undone (its savepoint), or a
    # subject its rule could not judge (left unclaimed). The rest of the scan went on.
    failed: tuple[str, ...] = ()


@dataclass(frozen=True)
class TimeRule:
    id: int
    version: int
    product: str
    definition: RuleDefinition

    @property
    def ledger_rule(self) -> str:
        return f"rule:{self.id}"


def time_rules(tx: TenantTx) -> list[TimeRule]:
    """The tenant's enabled time rules as they are now, in id order (the claim order)."""
    rows = tx.conn.execute(
        "SELECT id, version, product, definition FROM rules WHERE kind = 'time' AND enabled "
        "ORDER BY id").fetchall()
    return [TimeRule(int(str(r[0])), int(str(r[1])), str(r[2]), stored_rule(r[3]))  # type: ignore[arg-type]
            for r in rows]


# The rule as the scan read it, re-read by the claiming statement: no row when it has been
# edited or disabled since (a new version), so nothing is claimed under a stale definition.
_CURRENT_RULE = """
current_rule AS (
    SELECT r.id, r.version FROM rules r
    WHERE r.id = %(rule_id)s AND r.version = %(version)s AND r.enabled AND r.kind = 'time'
)"""

_SUBJECT_FACTS = """
s.kind, s.external_id, s.title, s.status,
coalesce((SELECT array_agg(lower(u.email) ORDER BY lower(u.email))
          FROM subject_assignees a JOIN users u ON u.id = a.user_id
          WHERE a.subject_id = s.id), '{}')"""


def _due_ctes(conditions: str) -> str:
    return f"""
WITH w AS (
    SELECT * FROM unnest(%(todays)s::date[], %(thresholds)s::text[], %(offsets)s::int[],
                         %(begun_max)s::date[], %(passed_max)s::date[])
         AS w(today, threshold, off, begun_max, passed_max)
), {_CURRENT_RULE}, candidates AS MATERIALIZED (  -- each subject's local today computed once
    SELECT s.id, iso_date_or_null(f.value #>> '{{}}') AS due,
           (%(as_of)s::timestamptz AT TIME ZONE coalesce(s.time_zone, %(tenant_tz)s))::date
               AS local_today
    FROM subject_fields f JOIN subjects s ON s.id = f.subject_id
    WHERE f.name = %(field)s AND jsonb_typeof(f.value) = 'string'
      AND iso_date_or_null(f.value #>> '{{}}') <= %(horizon)s  -- subject_fields_due
      AND s.product = %(product)s AND (%(kind)s::text IS NULL OR s.kind = %(kind)s)
      AND EXISTS (SELECT 1 FROM current_rule)
      AND ({conditions})
), begun AS (
    SELECT c.id, c.due, c.local_today, w.threshold, w.off,
           coalesce(c.due <= w.passed_max, false) AS passed,
           w.off = max(w.off) OVER (PARTITION BY c.id) AS latest
    FROM candidates c JOIN w ON w.today = c.local_today AND c.due <= w.begun_max
), probed AS (
    -- One statement writes every begun window of a subject at once, so once the row of its
    -- latest begun window exists all earlier ones do too: one probe per subject. (Said as a
    -- window over the subject's rows, not as a join of two CTEs: the candidates' row count
    -- cannot be estimated from the partial expression index, and a misestimate there made
    -- the join a nested loop over both.)
    SELECT b.*, bool_or(CASE WHEN b.latest THEN EXISTS (
               SELECT 1 FROM notification_ledger l
               WHERE l.rule = %(rule)s AND l.subject_kind = '{SUBJECT_KIND}'
                 AND l.subject_id = b.id AND l.threshold = b.threshold AND l.due_on = b.due)
           ELSE false END) OVER (PARTITION BY b.id) AS settled
    FROM begun b
), due AS (
    SELECT id, due, local_today, threshold, off, passed FROM probed WHERE NOT settled
)"""


_INSERT = f"""
INSERT INTO notification_ledger (rule, subject_kind, subject_id, threshold, due_on, status,
                                 status_reason, local_date, rule_id, rule_version)
SELECT %(rule)s, '{SUBJECT_KIND}', d.id, d.threshold, d.due,
       CASE WHEN d.passed THEN 'skipped' ELSE 'claimed' END,
       CASE WHEN d.passed THEN %(skipped_reason)s END, d.local_today, r.id, r.version
FROM {{source}} CROSS JOIN current_rule r
ORDER BY d.id, d.threshold, d.due
ON CONFLICT ON CONSTRAINT notification_once DO NOTHING
RETURNING id, status
"""


# One row back whatever was written: the ids to prepare and the number skipped (a first scan
# over old due dates writes mostly skipped rows, which need not travel to Python).
_SUMMARY = """
SELECT coalesce(array_agg(id ORDER BY id) FILTER (WHERE status = 'claimed'), '{}'),
       count(*) FILTER (WHERE status = 'skipped')
FROM written"""


def _claim_due_statement(conditions: str) -> str:
    return f"{_due_ctes(conditions)}, written AS ({_INSERT.format(source='due d')}){_SUMMARY}"


def _candidates_statement(conditions: str) -> str:
    return f"""{_due_ctes(conditions)}
SELECT d.id, d.due, d.local_today, d.threshold, d.passed, {_SUBJECT_FACTS}
FROM due d JOIN subjects s ON s.id = d.id
ORDER BY d.id, d.threshold"""


# The survivors of the conditions evaluated in Python (and turnaround breaches): claimed
# from parameters, under the same re-read of the rule's version.
_CLAIM_CHOSEN = f"""
WITH {_CURRENT_RULE}, written AS (
{_INSERT.format(source='''unnest(%(ids)s::bigint[], %(chosen_thresholds)s::text[], %(dues)s::date[],
                      %(passed)s::bool[], %(local_dates)s::date[])
     AS d(id, threshold, due, passed, local_today)''')}){_SUMMARY}"""


def _base_params(tx: TenantTx, rule: TimeRule, as_of: datetime) -> dict[str, Any]:
    return {"rule_id": rule.id, "version": rule.version, "rule": rule.ledger_rule,
            "product": rule.product, "kind": rule.definition.trigger.subject_kind,
            "as_of": as_of, "tenant_tz": tx.tenant.time_zone, "skipped_reason": SKIPPED_REASON}


def _compiled(rule: TimeRule) -> CompiledConditions:
    return compile_conditions([rule.definition.conditions, rule.definition.filters])


def _holds(rule: TimeRule, facts: Mapping[str, object]) -> bool:
    d = rule.definition
    return evaluate(d.conditions, Facts(facts))[0] and evaluate(d.filters, Facts(facts))[0]


def _subject_facts(row: tuple[object, ...]) -> dict[str, object]:
    kind, external_id, title, status, assignees = row
    return {"subject.kind": kind, "subject.external_id": external_id, "subject.title": title,
            "subject.status": status, "subject.assignees": list(assignees or [])}  # type: ignore[call-overload]


def _surviving(tx: TenantTx, rule: TimeRule, subjects: dict[int, dict[str, object]],
               failed: list[str]) -> set[int]:
    """The subjects for which the rule's whole trees hold, their stored facts loaded
    targeted (only the keys the trees read, one query per family for all of them). A
    subject whose facts the trees cannot judge is left out, and said in ``failed``."""
    d = rule.definition
    wanted = d.condition_facts().union(d.filter_facts())
    stored = load_facts_of_subjects(tx, {sid: wanted for sid in subjects}) if wanted \
        else {sid: {} for sid in subjects}
    kept = set()
    for sid, facts in subjects.items():
        try:
            if _holds(rule, {**facts, **stored.get(sid, {})}):
                kept.add(sid)
        except Exception as error:  # this subject's data: the others are judged all the same
            failed.append(f"rule {rule.id}, subject {sid}: {type(error).__name__}: {error}")
    return kept


def _written(row: tuple[object, ...] | None) -> tuple[list[int], int]:
    """The claimed ids and the number skipped, from a claim statement's one row."""
    assert row is not None
    ids, skipped = row
    return [int(str(i)) for i in ids], int(str(skipped))  # type: ignore[attr-defined]


def _claim_chosen(tx: TenantTx, params: dict[str, Any],
                  rows: list[tuple[int, str, Any, bool, Any]]) -> tuple[list[int], int]:
    if not rows:
        return [], 0
    ids, thresholds, dues, passed, local_dates = (list(c) for c in zip(*rows, strict=True))
    return _written(tx.conn.execute(_CLAIM_CHOSEN, {
        **params, "ids": ids, "chosen_thresholds": thresholds, "dues": dues, "passed": passed,
        "local_dates": local_dates}).fetchone())


def _claim_due(tx: TenantTx, rule: TimeRule, as_of: datetime, cal: Calendar,
               failed: list[str]) -> tuple[list[int], int]:
    due = rule.definition.trigger.due
    assert due is not None
    bounds = window_bounds(possible_todays(as_of), due.offsets, due.business_days, cal)
    compiled = _compiled(rule)
    params = {
        **_base_params(tx, rule, as_of), **compiled.params, "field": due.field,
        "todays": [b.today for b in bounds], "thresholds": [b.threshold for b in bounds],
        "offsets": [b.offset for b in bounds], "begun_max": [b.begun_max for b in bounds],
        "passed_max": [b.passed_max for b in bounds],
        "horizon": max(b.begun_max for b in bounds),
    }
    if compiled.exact:
        return _written(tx.conn.execute(_claim_due_statement(compiled.sql), params).fetchone())
    found = tx.conn.execute(_candidates_statement(compiled.sql), params).fetchall()
    subjects = {int(str(r[0])): _subject_facts(r[5:]) for r in found}
    keep = _surviving(tx, rule, subjects, failed) if subjects else set()
    chosen = [(int(str(r[0])), str(r[3]), r[1], bool(r[4]), r[2]) for r in found
              if int(str(r[0])) in keep]
    return _claim_chosen(tx, params, chosen)


def _turnaround_statement(rule: TimeRule, conditions: str) -> str:
    tat = rule.definition.trigger.turnaround
    assert tat is not None
    column = f"s.{_TIMESTAMPS[tat.after]}"
    return f"""
WITH {_CURRENT_RULE}
SELECT s.id, {column}, coalesce(s.time_zone, %(tenant_tz)s), {_SUBJECT_FACTS}
FROM subjects s
WHERE s.product = %(product)s AND (%(kind)s::text IS NULL OR s.kind = %(kind)s)
  AND {column} <= %(as_of)s::timestamptz - %(minimum)s::interval
  AND EXISTS (SELECT 1 FROM current_rule)
  AND ({conditions})
  AND NOT EXISTS (  -- this occurrence claimed already (whatever its breach date)
      SELECT 1 FROM notification_ledger l
      WHERE l.rule = %(rule)s AND l.subject_kind = '{SUBJECT_KIND}' AND l.subject_id = s.id
        AND l.threshold = %(threshold_prefix)s || floor(extract(epoch FROM {column}))::bigint)
ORDER BY s.id"""


def _claim_turnaround(tx: TenantTx, rule: TimeRule, as_of: datetime,
                      cal: Calendar, failed: list[str]) -> tuple[list[int], int]:
    tat = rule.definition.trigger.turnaround
    assert tat is not None
    compiled = _compiled(rule)
    params = {**_base_params(tx, rule, as_of), **compiled.params, "minimum": tat.minimum(),
              "threshold_prefix": f"tat:{tat.after}:"}
    found = tx.conn.execute(_turnaround_statement(rule, compiled.sql), params).fetchall()
    breached: dict[int, tuple[datetime, datetime, str]] = {}
    for row in found:
        started, zone = row[1], str(row[2])
        assert isinstance(started, datetime)
        breach = breach_at(started, tat, cal, zone)
        if breach <= as_of:
            breached[int(str(row[0]))] = (started, breach, zone)
    if not compiled.exact and breached:
        subjects = {int(str(r[0])): _subject_facts(r[3:]) for r in found if int(str(r[0])) in breached}
        keep = _surviving(tx, rule, subjects, failed)
        breached = {sid: b for sid, b in breached.items() if sid in keep}
    chosen = [(sid, turnaround_threshold(tat.after, started), local_date(breach, zone), False,
               local_date(as_of, zone)) for sid, (started, breach, zone) in sorted(breached.items())]
    return _claim_chosen(tx, params, chosen)


# --- the scan -----------------------------------------------------------------------------


def claim_time_rules(tx: TenantTx, as_of: datetime) -> TimeClaimCounts:
    """Claim every due milestone and turnaround breach of the tenant's time rules at the
    explicit instant ``as_of``, each subject's today in its own zone; first cancel what
    moved due dates left waiting. The new claims go to their product's preparation queue
    once ``tx`` commits (a PrepareClaims effect)."""
    if as_of.tzinfo is None:
        raise ValueError("as_of must be an aware datetime (an instant)")
    rules = time_rules(tx)
    if not rules:
        return TimeClaimCounts()
    # The same statement text serves every rule and tenant, so a prepared statement's generic
    # plan, made while this tenant's ledger was empty, would be reused for a full one (a
    # sequential scan of the ledger per subject): plan each claim for the data it meets.
    tx.conn.execute("SET LOCAL plan_cache_mode = force_custom_plan")
    with tx.conn.cursor(row_factory=tuple_row) as cur:  # a host may write fields without the register
        cancelled = cancel_moved_due_dates(cur, tx.tenant.schema)
    cal = load_calendar(tx)
    claimed = skipped = 0
    failed: list[str] = []
    for rule in rules:
        try:
            # A savepoint: a rule that fails undoes its own claims only, never another
            # rule's nor the licence claims of the same scan.
            with tx.conn.transaction():
                if rule.definition.trigger.due is not None:
                    ids, rule_skipped = _claim_due(tx, rule, as_of, cal, failed)
                else:
                    ids, rule_skipped = _claim_turnaround(tx, rule, as_of, cal, failed)
        except Exception as error:
            failed.append(f"rule {rule.id}: {type(error).__name__}: {error}")
            continue
        tx.after_commit(PrepareClaims([(rule.product, ledger_id) for ledger_id in ids]))
        claimed += len(ids)
        skipped += rule_skipped
    return TimeClaimCounts(claimed, skipped, cancelled, tuple(failed))
