"""Which language a person reads: their own choice (the preference centre), else their client's
default, else the tenant's, else English; a choice Tocsin ships no catalog for is passed over."""

from __future__ import annotations

__all__ = ["DEFAULT_LOCALE", "LOCALE_NAMES", "SHIPPED_LOCALES", "resolve_locale", "valid_locale"]

from domain.errors import InvalidInput
from domain.messages import N_

DEFAULT_LOCALE = "en"
SHIPPED_LOCALES = ("en", "de", "fr")  # each has a complete catalog under tocsin/core/locale/
# Each language named in itself, as a picker shows it.
LOCALE_NAMES = {"en": "English", "de": "Deutsch", "fr": "Français"}


def resolve_locale(user: str | None, client: str | None, tenant: str | None) -> str:
    """The first of user -> client -> tenant that Tocsin ships, else English."""
    for choice in (user, client, tenant):
        if choice in SHIPPED_LOCALES:
            return choice
    return DEFAULT_LOCALE


def valid_locale(value: str) -> str:
    if value not in SHIPPED_LOCALES:
        raise InvalidInput(N_("unknown language “{value}”: choose one of {languages}"), value=value,
                           languages=", ".join(SHIPPED_LOCALES))
    return value
