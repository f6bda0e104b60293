"""Preparing the notices of tenants' rules: from a claimed ledger row to inbox rows and
email deliveries.

A rule that fires claims a ledger row (rule 'rule:<id>', threshold 'event:<id>' for an event
rule, 'offset:<n>' or 'tat:<after>:<start>' for a time rule's scan) naming the rule version
that fired; preparation does the work the claim deliberately left undone, as
late as possible: the recipients are resolved now (db/recipients.py), the facts read now,
the version's templates rendered in the sandbox (domain/templates.py), and the notices
written by the same statement as the licence's (db/ledger.py notify_statement), with
preferences, quiet hours, digests and the rule's channels applied there.

Failure: a claim that cannot be prepared (a template refused, a recipient that cannot be
resolved, a database error) fails the whole preparing transaction, which rolls back with
everything it wrote. The transaction is then poisoned, so the failure is recorded by
`record_preparation_failure` in a fresh one; after PREPARE_MAX_ATTEMPTS the claim is
left alone and shown on the Needs-attention page.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from typing import Any
from zoneinfo import ZoneInfo

from db.calendar import load_calendar
from db.deliveries import schedule_deliveries
from db.facts import load_all_facts, load_subject_facts
from db.ledger import notify_statement, write_notices
from db.recipients import resolve_recipients
from db.tenancy import TenantTx, tenant_tx
from domain.errors import TocsinError
from domain.obligations import breach_at, offset_of, shift
from domain.preferences import valid_category
from domain.rules import stored_rule
from domain.templates import TemplateRefused, render, template_context

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


# The rule claims of these ids that are still to prepare, locked for this transaction;
# another transaction preparing one right now keeps it (SKIP LOCKED), and one that failed
# for good is left to an admin.
_LOCK_CLAIMS = """
SELECT id, rule_id, rule_version, subject_id, event_id, threshold, due_on
FROM notification_ledger
WHERE id = ANY(%s) AND rule_id IS NOT NULL AND status = 'claimed'
  AND prepared_at IS NULL AND prepare_failed_at IS NULL
ORDER BY id
FOR UPDATE SKIP LOCKED
"""

# The rule's notices for one claim: recipients already bound, one row per user.
_RULE_NOTIFY = notify_statement("""
recipients AS (
    SELECT %(ledger_id)s::bigint AS ledger_id, r.user_id, %(title)s::text AS title,
           %(body)s::text AS body, %(data)s::jsonb AS data
    FROM unnest(%(user_ids)s::bigint[]) AS r(user_id)
)""")


def prepare_rule_claims(tx: TenantTx, ledger_ids: list[int], now: datetime | None = None) -> PreparedReport:
    """Prepare these rule claims: recipients, facts and templates as they are now, then the
    inbox rows and email deliveries (enqueued once ``tx`` commits). Idempotent: a claim
    prepared already is skipped, and the notices are keyed by (claim, recipient) anyway.
    Raises PreparationFailed naming the claim that failed; ``tx`` must then roll back."""
    rows = tx.conn.execute(_LOCK_CLAIMS, [sorted(set(ledger_ids))]).fetchall()
    claims = [_Claim(int(str(r[0])), int(str(r[1])), int(str(r[2])), int(str(r[3])),
                     None if r[4] is None else int(str(r[4])), str(r[5]),
                     r[6] if isinstance(r[6], date) else None) for r in rows]
    prepared, notices, emails = [], 0, []
    for claim in claims:
        try:
            users, due = _prepare(tx, claim, now)
        except PreparationFailed:
            raise
        except Exception as error:  # any failure of this claim poisons the transaction
            raise PreparationFailed(claim.ledger_id, _describe(error)) from error
        prepared.append(claim.ledger_id)
        notices += users
        emails.extend(due)
    done = set(prepared)
    return PreparedReport(prepared, sorted(set(ledger_ids) - done), notices, emails)


def _describe(error: BaseException) -> str:
    if isinstance(error, TocsinError):
        return str(error)
    return f"{type(error).__name__}: {error}"


def _prepare(tx: TenantTx, claim: _Claim, now: datetime | None) -> tuple[int, list[int]]:
    version = tx.conn.execute(
        """
        SELECT r.name, r.product, v.definition
        FROM rule_versions v JOIN rules r ON r.id = v.rule_id
        WHERE v.rule_id = %s AND v.version = %s
        """,
        [claim.rule_id, claim.rule_version],
    ).fetchone()
    if version is None:
        raise PreparationFailed(claim.ledger_id,
                                f"rule {claim.rule_id} has no version {claim.rule_version}")
    rule_name, product, definition = str(version[0]), str(version[1]), version[2]
    actions = _actions(definition)
    channels = actions.get("channels") or ["email", "in_app"]
    template = actions.get("template") or {}
    if not isinstance(channels, list) or not isinstance(template, dict):
        raise PreparationFailed(claim.ledger_id, "the rule version's actions are malformed")
    category = valid_category(str(actions.get("category", "case_alert")))

    event_type, trigger, changes, metadata = None, None, {}, {}
    if claim.event_id is not None:
        event = tx.conn.execute(
            "SELECT event_type, trigger_type, changes, metadata FROM events WHERE id = %s",
            [claim.event_id],
        ).fetchone()
        if event is not None:
            event_type, trigger = str(event[0]), None if event[1] is None else str(event[1])
            changes = event[2] if isinstance(event[2], dict) else {}
            metadata = event[3] if isinstance(event[3], dict) else {}
    facts = {**load_subject_facts(tx, claim.subject_id), **load_all_facts(tx, claim.subject_id)}
    due, turnaround = _time_context(tx, claim, definition)
    context = template_context(facts, event_type=event_type, trigger=trigger, metadata=metadata,
                               changes=changes, rule_name=rule_name, due=due, turnaround=turnaround)
    title = _render(claim, "title", str(template.get("title") or ""), context)
    body = _render(claim, "body", str(template.get("body") or ""), context)
    title = " ".join(title.split())[:MAX_TITLE_CHARS] or rule_name

    users = resolve_recipients(tx, claim.subject_id, actions.get("recipients") or [])
    critical = actions.get("critical") is True
    data: dict[str, Any] = {
        "product": product, "subject_id": claim.subject_id,
        "subject": facts.get("subject.external_id"), "rule_id": claim.rule_id,
        "rule_version": claim.rule_version, "event_id": claim.event_id,
    }
    if critical:
        data["critical"] = True  # read again at send time (db/deliveries.py)
    written = write_notices(
        tx, _RULE_NOTIFY,
        {"ledger_id": claim.ledger_id, "user_ids": users, "title": title, "body": body,
         "data": json.dumps(data)},
        category=category, now=now, critical=critical,
        in_app="in_app" in channels, email="email" in channels,
    )
    tx.conn.execute(
        "UPDATE notification_ledger SET prepared_at = now(), prepare_error = NULL WHERE id = %s",
        [claim.ledger_id],
    )
    schedule_deliveries(tx, written.emails_due)  # handed to the workers once tx commits
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
        day = shift(claim.due_on, offset, rule.trigger.due.business_days, load_calendar(tx))
        # "offset" is a keyword of Liquid's grammar ({{ due.offset }} does not parse; it reads
        # {{ due["offset"] }}), so the same value is also offset_days.
        return {"date": claim.due_on.isoformat(), "offset": offset, "offset_days": offset,
                "milestone_date": day.isoformat()}, None
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


def _render(claim: _Claim, part: str, text: str, context: dict[str, object]) -> str:
    try:
        return render(text, context)
    except TemplateRefused as refused:
        raise PreparationFailed(claim.ledger_id, f"the {part} template was refused: {refused.reason}") \
            from None


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
    tx.claims_to_prepare.extend((str(r[1]), int(str(r[0]))) for r in rows)
    return len(rows)
