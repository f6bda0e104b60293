"""Validation of the names people type: tenant slugs, time zones, dates, emails, roles."""

from __future__ import annotations

import re
from datetime import UTC, date, datetime
from enum import StrEnum
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from domain.errors import InvalidInput

__all__ = [
    "ASSIGNABLE_ROLES",
    "EMAIL_MAX_LENGTH",
    "EMAIL_PATTERN",
    "SLUG_MAX_LENGTH",
    "SLUG_PATTERN",
    "WHOLE_NUMBER",
    "Plan",
    "Role",
    "parse_date",
    "parse_instant",
    "parse_whole_number",
    "schema_for",
    "valid_email",
    "valid_name",
    "valid_plan",
    "valid_role",
    "valid_slug",
    "valid_zone",
]

# Lower-case words joined by single hyphens: the schema name replaces hyphens with
# underscores, and because slugs cannot contain underscores no two slugs share a schema.
SLUG_PATTERN = re.compile(r"[a-z][a-z0-9]*(?:-[a-z0-9]+)*")
SLUG_MAX_LENGTH = 40  # characters; keeps t_<slug> well under Postgres' 63-byte identifiers
EMAIL_PATTERN = re.compile(r"[^@\s]+@[^@\s]+\.[^@\s]+")
EMAIL_MAX_LENGTH = 254  # characters, RFC 5321
# ASCII digits only: str.isdigit() also accepts "²" and "٣", which int() then refuses or
# reads; 18 digits always fit a bigint.
WHOLE_NUMBER = re.compile(r"[0-9]{1,18}")


class Role(StrEnum):
    ADMIN = "admin"
    MEMBER = "member"
    CLIENT_USER = "client_user"
    # A rule's fixed address (db/notices/recipients.py): receives email, never signs in, is never
    # invited as such and is not listed among the members.
    CONTACT = "contact"


# The roles a person can be given by hand (the CLI, the members page).
ASSIGNABLE_ROLES = (Role.ADMIN, Role.MEMBER, Role.CLIENT_USER)


class Plan(StrEnum):
    STANDARD = "standard"
    ENTERPRISE = "enterprise"


def valid_slug(slug: str) -> str:
    if not (2 <= len(slug) <= SLUG_MAX_LENGTH) or not SLUG_PATTERN.fullmatch(slug):
        raise InvalidInput(
            f"invalid tenant slug {slug!r}: use 2-{SLUG_MAX_LENGTH} lower-case letters and "
            "digits, words joined by single hyphens, starting with a letter"
        )
    return slug


def schema_for(slug: str) -> str:
    return "t_" + valid_slug(slug).replace("-", "_")


def valid_zone(name: str) -> str:
    if name not in _known_zones():
        raise InvalidInput(f"unknown time zone {name!r}: use an IANA name such as Europe/London")
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise InvalidInput(f"unknown time zone {name!r}") from None
    return name


def _known_zones() -> frozenset[str]:
    global _ZONES
    if _ZONES is None:
        _ZONES = frozenset(available_timezones())
    return _ZONES


_ZONES: frozenset[str] | None = None


def parse_whole_number(text: str, message: str) -> int:
    """A typed id or count, or InvalidInput with the message (say what to type)."""
    if not WHOLE_NUMBER.fullmatch(text):
        raise InvalidInput(message)
    return int(text)


def parse_date(text: str) -> date:
    try:
        if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", text):
            raise ValueError
        return date.fromisoformat(text)
    except ValueError:
        raise InvalidInput(f"malformed date {text!r}: use YYYY-MM-DD, e.g. 2027-03-31") from None


def parse_instant(text: str) -> datetime:
    """An ISO-8601 instant; it must carry an offset, since a bare local time names no instant."""
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00"))
        if value.tzinfo is not None:
            value = value.astimezone(UTC)
    except (ValueError, OverflowError):  # OverflowError: year 1 with a positive offset
        raise InvalidInput(
            f"malformed instant {text!r}: use ISO-8601 with an offset, "
            "e.g. 2027-03-28T00:30:00+00:00"
        ) from None
    if value.tzinfo is None:
        raise InvalidInput(
            f"instant {text!r} has no UTC offset: add one, e.g. {text}+00:00 or {text}Z"
        )
    return value.astimezone(UTC)


def valid_email(email: str) -> str:
    email = email.strip().lower()
    if len(email) > EMAIL_MAX_LENGTH or not EMAIL_PATTERN.fullmatch(email):
        raise InvalidInput(f"invalid email address {email!r}")
    return email


def valid_role(role: str) -> Role:
    """A role a person may be given by hand: contacts are made by rules, never by hand."""
    try:
        value = Role(role)
    except ValueError:
        value = None
    if value not in ASSIGNABLE_ROLES:
        raise InvalidInput(
            f"unknown role {role!r}: use one of {', '.join(r.value for r in ASSIGNABLE_ROLES)}"
        )
    assert value is not None
    return value


def valid_plan(plan: str) -> Plan:
    try:
        return Plan(plan)
    except ValueError:
        raise InvalidInput(
            f"unknown plan {plan!r}: use one of {', '.join(p.value for p in Plan)}"
        ) from None


# Control characters (U+0000-U+001F, U+007F-U+009F): never meant in a name or a label;
# PostgreSQL cannot store the first of them at all (a 500 once, found by the fuzz tests).
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")


def valid_name(name: str, what: str = "name", max_length: int = 200) -> str:
    name = name.strip()
    if not name:
        raise InvalidInput(f"{what} must not be empty")
    if len(name) > max_length:
        raise InvalidInput(f"{what} is longer than {max_length} characters")
    if _CONTROL.search(name):
        raise InvalidInput(f"{what} must not contain control characters (such as a tab or NUL)")
    return name

