"""Email failover to SMTP: the tenant's policy, the streak of SES failures every worker adds
to, and the attempt's record that it went through a second provider (actors/email.py calls
these around an SES error; domain/delivery/failover.py decides)."""

from __future__ import annotations

from dataclasses import asdict
from datetime import datetime

from db.delivery.deliveries import ClaimedEmail
from db.evidence.audit import record_audit
from db.platform.tenancy import TenantTx, tenant_tx
from domain.delivery.failover import FailoverPolicy, SesFailure, SesRun, failover_reason, next_run

__all__ = ["failover_policy", "note_failover", "reset_ses_run", "save_failover_policy",
           "ses_failure_reason"]

_POLICY_COLUMNS = "on_paused, on_throttled, throttled_minutes, on_5xx, run_of_5xx"


def failover_policy(tx: TenantTx) -> FailoverPolicy:
    row = tx.conn.execute(f"SELECT {_POLICY_COLUMNS} FROM email_failover_policy").fetchone()
    if row is None:
        return FailoverPolicy()
    return FailoverPolicy(bool(row[0]), bool(row[1]), int(str(row[2])), bool(row[3]), int(str(row[4])))


def save_failover_policy(tx: TenantTx, policy: FailoverPolicy, user_id: int | None) -> None:
    """The tenant's choice of failover classes (an administrator's, audited)."""
    before = failover_policy(tx)
    tx.conn.execute(
        f"""
        INSERT INTO email_failover_policy ({_POLICY_COLUMNS}, updated_by)
        VALUES (%(on_paused)s, %(on_throttled)s, %(throttled_minutes)s, %(on_5xx)s, %(run_of_5xx)s,
                %(user)s)
        ON CONFLICT (id) DO UPDATE SET
            on_paused = excluded.on_paused, on_throttled = excluded.on_throttled,
            throttled_minutes = excluded.throttled_minutes, on_5xx = excluded.on_5xx,
            run_of_5xx = excluded.run_of_5xx, updated_by = excluded.updated_by, updated_at = now()
        """,
        {**asdict(policy), "user": user_id},
    )
    record_audit(tx, "email_failover.save", "email_failover", None, before=asdict(before),
                 after=asdict(policy))


def ses_failure_reason(slug: str, failure: SesFailure, now: datetime) -> str | None:
    """One more SES failure of the tenant, added to the streak every worker shares (its row
    locked for the moment it takes), and why the email goes through SMTP now, or None. A
    tenant that chose no failover class keeps no streak."""
    with tenant_tx(slug) as tx:
        policy = failover_policy(tx)
        if not policy.enabled:
            return None
        row = tx.conn.execute(
            "INSERT INTO ses_failure_run DEFAULT VALUES ON CONFLICT (id) DO UPDATE SET id = true "
            "RETURNING server_errors, throttled_since").fetchone()
        assert row is not None
        since = row[1]
        assert since is None or isinstance(since, datetime)
        run = next_run(SesRun(int(str(row[0])), since), failure, now)
        tx.conn.execute(
            "UPDATE ses_failure_run SET server_errors = %s, throttled_since = %s, updated_at = now()",
            [run.server_errors, run.throttled_since])
        return failover_reason(policy, failure, run, now)


def reset_ses_run(slug: str) -> None:
    """SES took an email: the streak is over."""
    with tenant_tx(slug) as tx:
        tx.conn.execute(
            "UPDATE ses_failure_run SET server_errors = 0, throttled_since = NULL, updated_at = now() "
            "WHERE server_errors <> 0 OR throttled_since IS NOT NULL")


def note_failover(slug: str, claim: ClaimedEmail, reason: str) -> bool:
    """Committed right before the SMTP call: the attempt goes through a second provider, and
    why. False when the delivery is no longer ours (token, sending, lease): do not call."""
    with tenant_tx(slug) as tx:
        row = tx.conn.execute(
            """
            UPDATE delivery_attempts a
            SET providers = a.providers || '{smtp}'::text[], failover_reason = %(reason)s,
                provider_called_at = now()
            WHERE a.delivery_id = %(id)s AND a.claim_token = %(token)s AND a.ended_at IS NULL
              AND NOT 'smtp' = ANY(a.providers)
              AND (SELECT d.claim_token = %(token)s AND d.status = 'sending' AND d.lease_until > now()
                   FROM notification_deliveries d WHERE d.id = %(id)s)
            RETURNING a.id
            """,
            {"id": claim.delivery_id, "token": claim.claim_token, "reason": reason[:500]},
        ).fetchone()
    return row is not None
