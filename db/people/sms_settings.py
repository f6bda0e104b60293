"""A person's texts: their mobile number (E.164), SMS on or off per category, and the STOP
that keeps every text from their number. Each change is audited (the preference centre's
SMS panel, portal/routes/sms.py, calls these)."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from db.evidence.audit import record_audit
from db.platform.tenancy import TenantTx, tenant_tx
from domain.delivery.preferences import valid_category
from domain.delivery.sms import effective_cap, tenant_cap
from tocsin.core.phone_numbers import e164

__all__ = ["SmsSettings", "SmsSpend", "clear_phone", "month_spend", "resume_texts", "save_phone",
           "set_sms_category", "set_spend_cap", "sms_available", "sms_settings", "spend_cap", "stop_texts",
           "tenant_has_numbers"]


@dataclass(frozen=True)
class SmsSettings:
    phone: str | None
    categories: frozenset[str]  # texts on for these
    stopped: bool  # the number is on the STOP list


def sms_settings(tx: TenantTx, user_id: int) -> SmsSettings:
    row = tx.conn.execute(
        "SELECT p.phone, o.phone IS NOT NULL FROM sms_numbers p "
        "LEFT JOIN sms_opt_outs o ON o.phone = p.phone WHERE p.user_id = %s", [user_id]).fetchone()
    on = tx.conn.execute("SELECT category FROM sms_preferences WHERE user_id = %s AND sms",
                         [user_id]).fetchall()
    return SmsSettings(None if row is None else str(row[0]), frozenset(str(r[0]) for r in on),
                       bool(row and row[1]))


def save_phone(tx: TenantTx, user_id: int, typed: str) -> str:
    """The person's mobile number, checked and kept in E.164 (InvalidInput says what is wrong)."""
    phone = e164(typed)
    before = sms_settings(tx, user_id).phone
    tx.conn.execute(
        "INSERT INTO sms_numbers (user_id, phone) VALUES (%s, %s) "
        "ON CONFLICT (user_id) DO UPDATE SET phone = excluded.phone, updated_at = now()",
        [user_id, phone])
    record_audit(tx, "sms.phone", "user", user_id, before={"phone": before}, after={"phone": phone})
    return phone


def clear_phone(tx: TenantTx, user_id: int) -> None:
    before = sms_settings(tx, user_id).phone
    tx.conn.execute("DELETE FROM sms_numbers WHERE user_id = %s", [user_id])
    record_audit(tx, "sms.phone", "user", user_id, before={"phone": before}, after={"phone": None})


def set_sms_category(tx: TenantTx, user_id: int, category: str, on: bool) -> None:
    valid_category(category)
    tx.conn.execute(
        "INSERT INTO sms_preferences (user_id, category, sms) VALUES (%s, %s, %s) "
        "ON CONFLICT (user_id, category) DO UPDATE SET sms = excluded.sms, updated_at = now()",
        [user_id, category, on])
    record_audit(tx, "sms.category", "user", user_id, after={"category": category, "sms": on})


def stop_texts(tx: TenantTx, user_id: int) -> None:
    """STOP: the person's number joins the tenant's STOP list (no text is claimed for it)."""
    phone = sms_settings(tx, user_id).phone
    if phone is None:
        return
    tx.conn.execute("INSERT INTO sms_opt_outs (phone, source) VALUES (%s, 'person') "
                    "ON CONFLICT (phone) DO NOTHING", [phone])
    record_audit(tx, "sms.stop", "user", user_id, after={"stopped": True})


def resume_texts(tx: TenantTx, user_id: int) -> None:
    """The person takes their own STOP back (a STOP the provider reported stays: the number
    must opt in again with the carrier)."""
    phone = sms_settings(tx, user_id).phone
    if phone is None:
        return
    tx.conn.execute("DELETE FROM sms_opt_outs WHERE phone = %s AND source = 'person'", [phone])
    record_audit(tx, "sms.stop", "user", user_id, after={"stopped": False})


# --- the tenant's monthly spend cap (the Channels page's SMS row) -------------------------

# This month's spend: the price reserved by every attempt called since the start of the
# database clock's calendar month in UTC (the clock that stamps called_at).
MONTH_SPEND = """
SELECT coalesce(sum(a.cost), 0), to_char(m.start AT TIME ZONE 'UTC', 'YYYY-MM')
FROM (SELECT date_trunc('month', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' AS start) m
LEFT JOIN sms_attempts a ON a.called_at >= m.start AND a.cost IS NOT NULL
GROUP BY m.start
"""


@dataclass(frozen=True)
class SmsSpend:
    spent: Decimal  # this month's, so far
    month: str  # YYYY-MM (UTC)
    own_cap: Decimal | None  # the tenant's own cap, None: the operator's applies
    cap: Decimal  # the one texts are checked against
    ceiling: Decimal  # the operator's (SMS_MONTHLY_SPEND_CAP)


def spend_cap(tx: TenantTx, ceiling: Decimal) -> Decimal:
    """The cap this tenant's texts are checked against: its own, never above ``ceiling``."""
    row = tx.conn.execute("SELECT cap FROM sms_spend_cap").fetchone()
    return effective_cap(None if row is None else Decimal(str(row[0])), ceiling)


def month_spend(tx: TenantTx, ceiling: Decimal) -> SmsSpend:
    spent = tx.conn.execute(MONTH_SPEND).fetchone()
    assert spent is not None
    row = tx.conn.execute("SELECT cap FROM sms_spend_cap").fetchone()
    own = None if row is None else Decimal(str(row[0]))
    return SmsSpend(Decimal(str(spent[0])), str(spent[1]), own, effective_cap(own, ceiling), ceiling)


def set_spend_cap(tx: TenantTx, typed: str, ceiling: Decimal) -> Decimal:
    """The tenant's own monthly cap, refused (InvalidInput) when negative or above the
    operator's ``ceiling``; audited."""
    cap = tenant_cap(typed, ceiling)
    row = tx.conn.execute("SELECT cap FROM sms_spend_cap").fetchone()
    tx.conn.execute(
        "INSERT INTO sms_spend_cap (only_row, cap) VALUES (true, %s) "
        "ON CONFLICT (only_row) DO UPDATE SET cap = excluded.cap, updated_at = now()", [cap])
    record_audit(tx, "sms.spend_cap", "tenant", tx.tenant.id,
                 before={"cap": None if row is None else str(row[0])}, after={"cap": str(cap)})
    return cap


def tenant_has_numbers(slug: str) -> bool:
    """Whether anyone of the tenant gave a mobile number (else SNS's opt-out list is not read)."""
    with tenant_tx(slug) as tx:
        return sms_available(tx)


def sms_available(tx: TenantTx) -> bool:
    """Whether a rule may name texts here: someone in the tenant gave a mobile number."""
    return tx.conn.execute("SELECT 1 FROM sms_numbers LIMIT 1").fetchone() is not None
