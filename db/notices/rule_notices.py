"""Preparing the notices of tenants' rules: from a claimed ledger row to inbox rows and
email deliveries.

A rule that fires claims a ledger row (rule 'rule:<id>', threshold 'event:<id>' for an event
rule, 'offset:<n>' or 'tat:<after>:<start>' for a time rule's scan) naming the rule version
that fired; preparation does the work the claim deliberately left undone, as
late as possible: the recipients are resolved now (db/notices/recipients.py), the facts read now,
the version's templates rendered in the sandbox (domain/rules/templates.py), and the notices
written by the same statement as the licence's (db/notices/fanout.py notify_statement), with
preferences, quiet hours, digests and the rule's channels applied there.

A template the sandbox refuses for this claim (a limit reached, a render error) fails that
notice alone: its part is rendered from the default template (domain/rules/templates.py), the
claim is prepared all the same, and the refusal is kept on the claim (``prepare_error`` of a
prepared row) for the Needs-attention page (db/evidence/ledger_view.py defaulted_notices). Retrying
would only refuse it again, and a batch must not wait for it.

Failure: a claim that cannot be prepared otherwise (a recipient that cannot be resolved,
malformed actions, a database error) fails the whole preparing transaction, which rolls
back with everything it wrote. The transaction is then poisoned, so the failure is recorded
by `record_preparation_failure` in a fresh one; after PREPARE_MAX_ATTEMPTS the claim is
left alone and shown on the Needs-attention page.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from typing import Any
from zoneinfo import ZoneInfo

from db.delivery.deliveries import schedule_deliveries
from db.events.facts import load_subjects_and_all_facts
from db.notices.fanout import notify_statement, write_notices
from db.notices.recipients import resolve_recipients
from db.platform.effects import PrepareClaims
from db.platform.tenancy import TenantTx, tenant_tx
from db.rules.calendar import load_calendar
from domain.delivery.preferences import valid_category
from domain.errors import TocsinError
from domain.rules.definitions import stored_rule
from domain.rules.obligation_dates import breach_at, due_context, offset_of
from domain.rules.templates import DEFAULT_BODY, DEFAULT_TITLE, TemplateRefused, render, template_context

__all__ = [
    "MAX_ERROR_CHARS",
    "MAX_TITLE_CHARS",
    "FailureRecorded",
    "PreparationFailed",
    "PreparedReport",
    "prepare_rule_claims",
    "record_preparation_failure",
    "unprepared_rule_claims",
]

MAX_ERROR_CHARS = 500  # characters of an error kept on the ledger row
MAX_TITLE_CHARS = 200  # characters of a rendered title (one line in the inbox)


class PreparationFailed(TocsinError):
    """One claim could not be prepared; the transaction that tried must roll back."""

    def __init__(self, ledger_id: int, reason: str) -> None:
        super().__init__(f"ledger row {ledger_id}: {reason}")
        self.ledger_id = ledger_id
        self.reason = reason


@dataclass(frozen=True)
class PreparedReport:
    prepared: list[int] = field(default_factory=list)  # ledger rows prepared by this call
    # Asked for but not ours: prepared already, being prepared by another transaction,
    # failed for good, not a rule claim, no longer claimed.
    skipped: list[int] = field(default_factory=list)
    notices: int = 0  # users told in their inbox (visible rows)
    emails: list[int] = field(default_factory=list)  # deliveries handed to the workers after commit


@dataclass(frozen=True)
class _Claim:
    ledger_id: int
    rule_id: int
    rule_version: int
    subject_id: int
    event_id: int | None
    threshold: str = ""
    due_on: date | None = None
    rule_name: str | None = None  # None: the rule row is gone
    product: str | None = None
    # An event rule's event as it was recorded: (type, trigger, changes, metadata).
    event: tuple[str, str | None, dict[str, Any], dict[str, Any]] | None = None


# The rule claims of these ids that are still to prepare, locked for this transaction and
# marked prepared at once (the notices are written by the same transaction, which commits
# all of it or nothing), with what preparing them reads of their rule and event: one
# statement for the whole batch. Another transaction preparing one right now keeps it
# (SKIP LOCKED), and one that failed for good is left to an admin.
_LOCK_CLAIMS = """
WITH locked AS (
    SELECT id FROM notification_ledger
    WHERE id = ANY(%s) AND rule_id IS NOT NULL AND status = 'claimed'
      AND prepared_at IS NULL AND prepare_failed_at IS NULL
    ORDER BY id
    FOR UPDATE SKIP LOCKED
), marked AS (
    UPDATE notification_ledger l SET prepared_at = now(), prepare_error = NULL
    FROM locked WHERE l.id = locked.id
    RETURNING l.id, l.rule_id, l.rule_version, l.subject_id, l.event_id, l.threshold, l.due_on
)
SELECT m.id, m.rule_id, m.rule_version, m.subject_id, m.event_id, m.threshold, m.due_on,
       r.name, r.product, e.event_type, e.trigger_type, e.changes, e.metadata
FROM marked m LEFT JOIN rules r ON r.id = m.rule_id LEFT JOIN events e ON e.id = m.event_id
ORDER BY m.id
"""

# The rule's notices for one claim: recipients already bound, one row per user.
_RULE_NOTIFY = notify_statement("""
recipients AS (
    SELECT %(ledger_id)s::bigint AS ledger_id, r.user_id, %(title)s::text AS title,
           %(body)s::text AS body, %(data)s::jsonb AS data
    FROM unnest(%(user_ids)s::bigint[]) AS r(user_id)
)""")

# A rule version's definition never changes once written (an edit writes a new version), so
# it is read once per process: by (tenant id, rule id, version).
_VERSIONS_KEPT = 4_096  # definitions
_versions: OrderedDict[tuple[int, int, int], object] = OrderedDict()
_versions_lock = threading.Lock()


def prepare_rule_claims(tx: TenantTx, ledger_ids: list[int], now: datetime | None = None) -> PreparedReport:
    """Prepare these rule claims: recipients, facts and templates as they are now, then the
    inbox rows and email deliveries (enqueued once ``tx`` commits). Idempotent: a claim
    prepared already is skipped, and the notices are keyed by (claim, recipient) anyway.
    Raises PreparationFailed naming the claim that failed; ``tx`` must then roll back.

    Set-based where the claims share the work: one statement locks and marks them all with
    their rule and event, the rule versions come from the process's cache, and the subjects'
    facts are read for all of them in one round trip; then each claim's recipients and
    notices."""
    rows = tx.conn.execute(_LOCK_CLAIMS, [sorted(set(ledger_ids))]).fetchall()
    claims = [_claim(r) for r in rows]
    if not claims:
        return PreparedReport([], sorted(set(ledger_ids)), 0, [])
    definitions = _definitions(tx, {(c.rule_id, c.rule_version) for c in claims})
    facts = load_subjects_and_all_facts(tx, sorted({c.subject_id for c in claims}))
    prepared, notices, emails = [], 0, []
    for claim in claims:
        try:
            users, due = _prepare(tx, claim, definitions.get((claim.rule_id, claim.rule_version)),
                                  facts.get(claim.subject_id, {}), now)
        except PreparationFailed:
            raise
        except Exception as error:  # any failure of this claim poisons the transaction
            raise PreparationFailed(claim.ledger_id, _describe(error)) from error
        prepared.append(claim.ledger_id)
        notices += users
        emails.extend(due)
    schedule_deliveries(tx, emails)  # handed to the workers once tx commits
    done = set(prepared)
    return PreparedReport(prepared, sorted(set(ledger_ids) - done), notices, emails)


def _claim(r: tuple[object, ...]) -> _Claim:
    event = None if r[9] is None else (str(r[9]), None if r[10] is None else str(r[10]),
                                       r[11] if isinstance(r[11], dict) else {},
                                       r[12] if isinstance(r[12], dict) else {})
    return _Claim(int(str(r[0])), int(str(r[1])), int(str(r[2])), int(str(r[3])),
                  None if r[4] is None else int(str(r[4])), str(r[5]),
                  r[6] if isinstance(r[6], date) else None,
                  rule_name=None if r[7] is None else str(r[7]),
                  product=None if r[8] is None else str(r[8]), event=event)


def _definitions(tx: TenantTx, versions: set[tuple[int, int]]) -> dict[tuple[int, int], object]:
    """The definitions of these (rule, version) pairs that exist: cached ones, and the
    others in one statement."""
    tenant = tx.tenant.id
    with _versions_lock:
        found = {v: _versions[(tenant, *v)] for v in versions if (tenant, *v) in _versions}
    missing = sorted(versions - set(found))
    if missing:
        rows = tx.conn.execute(
            "SELECT v.rule_id, v.version, v.definition FROM rule_versions v "
            "JOIN unnest(%s::bigint[], %s::int[]) AS w (id, version) "
            "  ON v.rule_id = w.id AND v.version = w.version",
            [[m[0] for m in missing], [m[1] for m in missing]]).fetchall()
        with _versions_lock:
            for rule_id, version, definition in rows:
                key = (int(str(rule_id)), int(str(version)))
                found[key] = _versions[(tenant, *key)] = definition
            while len(_versions) > _VERSIONS_KEPT:
                _versions.popitem(last=False)
    return found


def _describe(error: BaseException) -> str:
    if isinstance(error, TocsinError):
        return str(error)
    return f"{type(error).__name__}: {error}"


def _prepare(tx: TenantTx, claim: _Claim, definition: object, facts: dict[str, object],
             now: datetime | None) -> tuple[int, list[int]]:
    if definition is None or claim.rule_name is None or claim.product is None:
        raise PreparationFailed(claim.ledger_id,
                                f"rule {claim.rule_id} has no version {claim.rule_version}")
    rule_name, product = claim.rule_name, claim.product
    actions = _actions(definition)
    channels = actions.get("channels") or ["email", "in_app"]
    template = actions.get("template") or {}
    if not isinstance(channels, list) or not isinstance(template, dict):
        raise PreparationFailed(claim.ledger_id, "the rule version's actions are malformed")
    category = valid_category(str(actions.get("category", "case_alert")))

    event_type, trigger, changes, metadata = claim.event or (None, None, {}, {})
    due, turnaround = _time_context(tx, claim, definition)
    context = template_context(facts, event_type=event_type, trigger=trigger, metadata=metadata,
                               changes=changes, rule_name=rule_name, due=due, turnaround=turnaround)
    refused: list[str] = []
    title = _render(claim, "title", str(template.get("title") or ""), DEFAULT_TITLE, context, refused)
    body = _render(claim, "body", str(template.get("body") or ""), DEFAULT_BODY, context, refused)
    title = " ".join(title.split())[:MAX_TITLE_CHARS] or rule_name
    if refused:
        tx.conn.execute(_TEMPLATE_REFUSED, ["; ".join(refused)[:MAX_ERROR_CHARS], claim.ledger_id])

    users = resolve_recipients(tx, claim.subject_id, actions.get("recipients") or [])
    critical = actions.get("critical") is True
    data: dict[str, Any] = {
        "product": product, "subject_id": claim.subject_id,
        "subject": facts.get("subject.external_id"), "rule_id": claim.rule_id,
        "rule_version": claim.rule_version, "event_id": claim.event_id,
    }
    if critical:
        data["critical"] = True  # read again at send time (db/delivery/deliveries.py)
    if "sms" in channels:
        data["sms"] = True  # the rule's choice of texts, read when each is queued and claimed
    written = write_notices(
        tx, _RULE_NOTIFY,
        {"ledger_id": claim.ledger_id, "user_ids": users, "title": title, "body": body,
         "data": json.dumps(data)},
        category=category, now=now, critical=critical,
        in_app="in_app" in channels, email="email" in channels,
        chat=tuple(str(c) for c in channels if c in ("slack", "teams")), sms="sms" in channels,
    )
    return len(written.inbox_users), written.emails_due


def _time_context(tx: TenantTx, claim: _Claim, definition: object
                  ) -> tuple[dict[str, object] | None, dict[str, object] | None]:
    """What a time rule's templates see of the milestone or the breach (None for events)."""
    if claim.event_id is not None or claim.due_on is None:
        return None, None
    offset = offset_of(claim.threshold)
    if isinstance(definition, str):
        definition = json.loads(definition)
    if not isinstance(definition, dict):
        return None, None
    rule = stored_rule(definition)
    if offset is not None and rule.trigger.due is not None:
        return due_context(claim.due_on, offset, rule.trigger.due.business_days,
                           load_calendar(tx)), None
    tat = rule.trigger.turnaround
    if claim.threshold.startswith("tat:") and tat is not None:
        started = datetime.fromtimestamp(int(claim.threshold.rsplit(":", 1)[1]), UTC)
        row = tx.conn.execute("SELECT coalesce(time_zone, %s) FROM subjects WHERE id = %s",
                              [tx.tenant.time_zone, claim.subject_id]).fetchone()
        zone = str(row[0]) if row else tx.tenant.time_zone
        breach = breach_at(started, tat, load_calendar(tx), zone)
        tz = ZoneInfo(zone)
        return None, {"started_at": started.astimezone(tz).isoformat(),
                      "breach_at": breach.astimezone(tz).isoformat()}
    return None, None


def _actions(definition: object) -> dict[str, Any]:
    if isinstance(definition, str):
        definition = json.loads(definition)
    actions = definition.get("actions") if isinstance(definition, dict) else None
    return actions if isinstance(actions, dict) else {}


# A claim prepared with a default template keeps why on its row (prepared_at is set in the
# same transaction): listed on Needs attention until the rule is edited.
_TEMPLATE_REFUSED = "UPDATE notification_ledger SET prepare_error = %s WHERE id = %s"


def _render(claim: _Claim, part: str, text: str, default: str, context: dict[str, object],
            refused: list[str]) -> str:
    """The part rendered from the rule's template, or from the default one when the sandbox
    refuses it for this claim (why is added to ``refused``)."""
    try:
        return render(text, context)
    except TemplateRefused as refusal:
        refused.append(f"the {part} template was refused: {refusal.reason}; "
                       f"the default {part} was sent instead")
    try:
        return render(default, context)
    except TemplateRefused as refusal:  # pragma: no cover - the defaults read plain facts only
        raise PreparationFailed(claim.ledger_id, f"the default {part} was refused too: "
                                f"{refusal.reason}") from None


@dataclass(frozen=True)
class FailureRecorded:
    attempts: int
    gave_up: bool  # the bound is reached: no more attempts, shown on Needs-attention


def record_preparation_failure(
    slug: str, ledger_id: int, error: str, *, max_attempts: int = 5
) -> FailureRecorded | None:
    """Count a failed preparation of this claim, in a transaction of its own: the one that
    failed is rolled back (poisoned), and nothing written on it would persist. At
    ``max_attempts`` the claim is marked failed for good. None if the row is gone or was
    prepared meanwhile."""
    with tenant_tx(slug) as tx:
        row = tx.conn.execute(
            """
            UPDATE notification_ledger
            SET prepare_attempts = prepare_attempts + 1, prepare_error = %(error)s,
                prepare_failed_at = CASE WHEN prepare_attempts + 1 >= %(bound)s
                                         THEN coalesce(prepare_failed_at, now()) END
            WHERE id = %(id)s AND rule_id IS NOT NULL AND prepared_at IS NULL
            RETURNING prepare_attempts, prepare_failed_at IS NOT NULL
            """,
            {"id": ledger_id, "error": error[:MAX_ERROR_CHARS], "bound": max_attempts},
        ).fetchone()
    if row is None:
        return None
    return FailureRecorded(int(str(row[0])), bool(row[1]))


def unprepared_rule_claims(tx: TenantTx, older_than_seconds: int, limit: int = 1_000) -> int:
    """The sweeper's repair path: rule claims committed but never prepared (their message was
    lost: Redis flushed, a worker killed before it acknowledged) and not given up on, older
    than ``older_than_seconds`` so that a preparation on its way is not raced. They go to
    their product's queue once ``tx`` commits; preparing twice changes nothing."""
    rows = tx.conn.execute(
        "SELECT l.id, r.product FROM notification_ledger l JOIN rules r ON r.id = l.rule_id "
        "WHERE l.rule_id IS NOT NULL AND l.status = 'claimed' AND l.prepared_at IS NULL "
        "  AND l.prepare_failed_at IS NULL AND l.claimed_at < now() - make_interval(secs => %s) "
        "ORDER BY l.claimed_at LIMIT %s",
        [older_than_seconds, limit]).fetchall()
    tx.after_commit(PrepareClaims([(str(r[1]), int(str(r[0]))) for r in rows]))
    return len(rows)
