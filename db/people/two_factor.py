"""Two-factor sign-in with TOTP (RFC 6238, pyotp): enrolment confirmed by a first code,
ten single-use recovery codes (stored as SHA-256 hashes, shown once), the second step of a
sign-in, and turning it off.

A code is accepted for the 30-second step before and after the current one (clocks drift),
and each step at most once: the last step accepted is stored with the user, and a code of
that step or an earlier one is refused, so a code seen over a shoulder cannot be replayed.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from dataclasses import dataclass

import pyotp

from db.evidence.audit import record_audit
from db.platform.tenancy import TenantTx
from domain.errors import InvalidInput, NotFound
from domain.people.sign_in import RECOVERY_CODE_COUNT, SignInRefusal, normalise_recovery_code
from tocsin.core.clock import timestamp

__all__ = [
    "STEP_SECONDS",
    "Enrolment",
    "SecondFactorRefused",
    "check_second_factor",
    "confirm_enrolment",
    "disable_two_factor",
    "pending_enrolment",
    "start_enrolment",
    "two_factor_enabled",
]

STEP_SECONDS = 30  # seconds per TOTP code (what every authenticator app uses)
_DRIFT_STEPS = 1  # steps either side of now that are still accepted
_RECOVERY_BYTES = 8  # random bytes per recovery code (13 base32 characters)


class SecondFactorRefused(Exception):
    def __init__(self, reason: SignInRefusal):
        super().__init__(reason.value)
        self.reason = reason


@dataclass(frozen=True)
class Enrolment:
    secret: str  # base32, for typing into an app by hand
    uri: str  # otpauth://, what a QR code carries


def _hash(code: str) -> str:
    return hashlib.sha256(normalise_recovery_code(code).encode()).hexdigest()


def _new_recovery_code() -> str:
    raw = base64.b32encode(secrets.token_bytes(_RECOVERY_BYTES)).decode().rstrip("=").lower()
    return f"{raw[:5]}-{raw[5:10]}-{raw[10:]}"


def two_factor_enabled(tx: TenantTx, user_id: int) -> bool:
    row = tx.conn.execute("SELECT totp_confirmed_at IS NOT NULL FROM users WHERE id = %s",
                          [user_id]).fetchone()
    return bool(row and row[0])


def start_enrolment(tx: TenantTx, user_id: int) -> Enrolment:
    """A fresh secret for a user without two-factor (until confirmed it signs nothing in);
    asking again replaces it, so only the app set up last works."""
    secret = pyotp.random_base32()
    row = tx.conn.execute(
        "UPDATE users SET totp_secret = %s, totp_last_step = NULL WHERE id = %s "
        "AND totp_confirmed_at IS NULL RETURNING email", [secret, user_id],
    ).fetchone()
    if row is None:
        raise InvalidInput("two-factor sign-in is on already: turn it off first to set up another app")
    return _enrolment(tx, secret, str(row[0]))


def _enrolment(tx: TenantTx, secret: str, email: str) -> Enrolment:
    uri = pyotp.TOTP(secret, interval=STEP_SECONDS).provisioning_uri(
        name=email, issuer_name=f"Tocsin {tx.tenant.name}")
    return Enrolment(secret, uri)


def pending_enrolment(tx: TenantTx, user_id: int) -> Enrolment | None:
    row = tx.conn.execute(
        "SELECT totp_secret, email FROM users WHERE id = %s AND totp_confirmed_at IS NULL "
        "AND totp_secret IS NOT NULL", [user_id]).fetchone()
    return None if row is None else _enrolment(tx, str(row[0]), str(row[1]))


def _matching_step(secret: str, code: str) -> int | None:
    code = code.strip().replace(" ", "")
    if not (code.isdigit() and len(code) == 6):
        return None
    totp = pyotp.TOTP(secret, interval=STEP_SECONDS)
    now_step = int(timestamp()) // STEP_SECONDS
    for step in range(now_step - _DRIFT_STEPS, now_step + _DRIFT_STEPS + 1):
        if hmac.compare_digest(totp.at(step * STEP_SECONDS), code):
            return step
    return None


def _spend_step(tx: TenantTx, user_id: int, step: int) -> bool:
    """Claim this step for the user: False when it (or a later one) was used already."""
    row = tx.conn.execute(
        "UPDATE users SET totp_last_step = %s WHERE id = %s "
        "AND (totp_last_step IS NULL OR totp_last_step < %s) RETURNING id", [step, user_id, step],
    ).fetchone()
    return row is not None


def confirm_enrolment(tx: TenantTx, user_id: int, code: str) -> list[str]:
    """Turn two-factor on with a first code from the app; the recovery codes, shown once."""
    row = tx.conn.execute(
        "SELECT totp_secret FROM users WHERE id = %s AND totp_confirmed_at IS NULL "
        "AND totp_secret IS NOT NULL FOR UPDATE", [user_id]).fetchone()
    if row is None:
        raise NotFound("no two-factor set-up in progress: start again")
    step = _matching_step(str(row[0]), code)
    if step is None or not _spend_step(tx, user_id, step):
        raise SecondFactorRefused(SignInRefusal.WRONG_CODE)
    tx.conn.execute("UPDATE users SET totp_confirmed_at = now() WHERE id = %s", [user_id])
    tx.conn.execute("DELETE FROM recovery_codes WHERE user_id = %s", [user_id])
    codes = [_new_recovery_code() for _ in range(RECOVERY_CODE_COUNT)]
    with tx.conn.cursor() as cur:
        cur.executemany("INSERT INTO recovery_codes (user_id, code_hash) VALUES (%s, %s)",
                        [(user_id, _hash(c)) for c in codes])
    record_audit(tx, "two_factor.enable", "user", user_id, after={"recovery_codes": len(codes)})
    return codes


def check_second_factor(tx: TenantTx, user_id: int, code: str) -> str:
    """Accept a current TOTP code or an unused recovery code ("totp" or "recovery_code");
    SecondFactorRefused otherwise. Either is spent in this transaction."""
    row = tx.conn.execute(
        "SELECT totp_secret FROM users WHERE id = %s AND totp_confirmed_at IS NOT NULL",
        [user_id]).fetchone()
    if row is None:
        raise SecondFactorRefused(SignInRefusal.WRONG_CODE)
    typed = code.strip()
    if typed.replace(" ", "").isdigit():
        step = _matching_step(str(row[0]), typed)
        if step is None:
            raise SecondFactorRefused(SignInRefusal.WRONG_CODE)
        if not _spend_step(tx, user_id, step):
            raise SecondFactorRefused(SignInRefusal.REUSED_CODE)
        return "totp"
    spent = tx.conn.execute(
        "UPDATE recovery_codes SET used_at = now() WHERE user_id = %s AND code_hash = %s "
        "AND used_at IS NULL RETURNING 1", [user_id, _hash(typed[:100])]).fetchone()
    if spent is not None:
        record_audit(tx, "two_factor.recovery_code", "user", user_id)
        return "recovery_code"
    used = tx.conn.execute("SELECT 1 FROM recovery_codes WHERE user_id = %s AND code_hash = %s",
                           [user_id, _hash(typed[:100])]).fetchone()
    raise SecondFactorRefused(SignInRefusal.REUSED_RECOVERY_CODE if used else SignInRefusal.WRONG_CODE)


def disable_two_factor(tx: TenantTx, user_id: int, code: str) -> None:
    """Turn two-factor off, proven with a current code or a recovery code."""
    check_second_factor(tx, user_id, code)
    tx.conn.execute("UPDATE users SET totp_secret = NULL, totp_confirmed_at = NULL, "
                    "totp_last_step = NULL WHERE id = %s", [user_id])
    tx.conn.execute("DELETE FROM recovery_codes WHERE user_id = %s", [user_id])
    record_audit(tx, "two_factor.disable", "user", user_id)
