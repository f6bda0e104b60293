"""Languages: the gettext catalogs Tocsin ships (tocsin/core/locale/<locale>/LC_MESSAGES/
messages.po, made and updated by `make translations`) and formatting for a reader's locale and
time zone (Babel's CLDR data).

The .po files are read once per process and compiled in memory: no compiled .mo file is kept
in the repository to drift from its source.
"""

from __future__ import annotations

import gettext
import io
import threading
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from functools import lru_cache
from importlib.resources import files
from zoneinfo import ZoneInfo

from babel import Locale
from babel.dates import format_date, format_datetime, format_timedelta
from babel.messages.mofile import write_mo
from babel.messages.pofile import read_po
from babel.numbers import format_decimal
from babel.support import Translations

from domain.people.locales import DEFAULT_LOCALE, SHIPPED_LOCALES
from tocsin.core.clock import utcnow

__all__ = ["DOMAIN", "Formats", "babel_locale", "catalog_path", "formats_for", "translations"]

DOMAIN = "messages"
# English is written for the tenants Tocsin serves, mostly in Europe: "7 December 2026".
_FORMAT_LOCALE = {"en": "en_GB"}

_lock = threading.Lock()
_loaded: dict[str, gettext.NullTranslations] = {}


def catalog_path(locale: str) -> str:
    return str(files("tocsin.core").joinpath("locale", locale, "LC_MESSAGES", f"{DOMAIN}.po"))


def translations(locale: str) -> gettext.NullTranslations:
    """The catalog of ``locale`` (English, the message ids themselves, for one not shipped)."""
    if locale not in SHIPPED_LOCALES or locale == DEFAULT_LOCALE:
        locale = DEFAULT_LOCALE
    with _lock:
        found = _loaded.get(locale)
        if found is None:
            found = _loaded[locale] = _compile(locale)
        return found


def _compile(locale: str) -> gettext.NullTranslations:
    try:
        with open(catalog_path(locale), "rb") as source:
            catalog = read_po(source, locale=locale)
    except FileNotFoundError:
        return gettext.NullTranslations()
    compiled = io.BytesIO()
    write_mo(compiled, catalog, use_fuzzy=False)
    compiled.seek(0)
    return Translations(compiled, domain=DOMAIN)


@dataclass(frozen=True)
class Formats:
    """Dates, numbers and relative days for one reader: their locale, in their time zone."""

    locale: str
    zone: str
    today: date  # the reader's calendar date now

    @property
    def _babel(self) -> Locale:
        return babel_locale(self.locale)

    def long_date(self, value: date, /) -> str:
        return format_date(value, format="long", locale=self._babel)

    def date_time(self, value: datetime, /) -> str:
        return format_datetime(value, format="medium", tzinfo=ZoneInfo(self.zone), locale=self._babel)

    def days_from_today(self, value: date, /) -> str:
        days = (value - self.today).days
        # threshold: 30 days stay "in 30 days", never "in 1 month"
        return format_timedelta(timedelta(days=days), granularity="day", threshold=1000, add_direction=True,
                                locale=self._babel) if days else _today_word(self.locale)

    def number(self, value: int, /) -> str:
        return format_decimal(value, locale=self._babel)


@lru_cache(maxsize=16)
def babel_locale(locale: str) -> Locale:
    """Babel's locale for a shipped one (English as written in Europe: "7 December 2026")."""
    return Locale.parse(_FORMAT_LOCALE.get(locale, locale))


def _today_word(locale: str) -> str:
    return translations(locale).gettext("today")


def formats_for(locale: str, zone: str) -> Formats:
    try:
        tz = ZoneInfo(zone)
    except (KeyError, ValueError):
        tz = ZoneInfo("UTC")
    return Formats(locale, zone, utcnow().astimezone(tz).date())
