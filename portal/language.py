"""The language and time zone a page is written in, and the template functions that write
it: ``_()`` and ``ngettext()`` read the catalogs (tocsin/core/locale, the emails' too), and the
date filters format for that language in that zone (Babel).

A signed-in person reads their own language (db.people.portal_look: theirs, else their
client's, else the tenant's, else English); a page for nobody yet (sign-in, an error before
sign-in, an unsubscribe link) follows the browser's Accept-Language among the shipped ones.

A translation is escaped as text (apostrophes kept), then its ``{placeholders}`` are filled
with escaped values (a value already marked safe, such as a ``{% set %}`` block, is kept): a
translator can never add markup, and a client's name can never inject any.
"""

from __future__ import annotations

from typing import Any

from babel import Locale, UnknownLocaleError
from jinja2 import pass_context
from jinja2.runtime import Context
from markupsafe import Markup

from domain.delivery.email_content import direction_of
from domain.people.locales import DEFAULT_LOCALE, SHIPPED_LOCALES
from portal.auth import VIEWER, Viewer
from tocsin.core.i18n import Formats, formats_for, translations

__all__ = [
    "LOCALE_STATE",
    "context_formats",
    "context_locale",
    "error_text",
    "gettext_markup",
    "ngettext_markup",
    "page_direction",
    "request_locale",
    "request_zone",
    "translate",
    "translate_plural",
]

LOCALE_STATE = "tocsin.locale"  # connection-state key: the page's language, once worked out
_ACCEPT_LANGUAGE_MAX = 200  # characters of the header read: a browser sends a few dozen


def _viewer(request: Any) -> Viewer | None:
    state = getattr(request, "state", None)
    viewer = None if state is None else state.get(VIEWER)
    return viewer if isinstance(viewer, Viewer) else None


def request_locale(request: Any) -> str:
    """The page's language for this request (see the module's docstring)."""
    state = getattr(request, "state", None)
    if state is None:
        return DEFAULT_LOCALE
    known = state.get(LOCALE_STATE)
    viewer = _viewer(request)
    if viewer is not None and viewer.look is not None:
        locale = viewer.look.locale
    elif isinstance(known, str):
        return known
    else:
        locale = _negotiated(request.headers.get("accept-language", "")[:_ACCEPT_LANGUAGE_MAX])
    state[LOCALE_STATE] = locale
    return locale


def request_zone(request: Any) -> str:
    """The reader's time zone: theirs, else their client's, else the tenant's; UTC for nobody."""
    viewer = _viewer(request)
    if viewer is None:
        return "UTC"
    return viewer.look.zone if viewer.look is not None else viewer.tenant.time_zone


def _negotiated(header: str) -> str:
    wanted = []
    for part in header.split(","):
        tag, _, quality = part.strip().partition(";q=")
        try:
            weight = float(quality) if quality else 1.0
        except ValueError:
            continue
        if tag and tag != "*":
            wanted.append((weight, tag.strip()))
    preferred = [tag for _, tag in sorted(wanted, key=lambda w: -w[0])]
    try:
        found = Locale.negotiate(preferred, list(SHIPPED_LOCALES), sep="-")
    except (UnknownLocaleError, ValueError):
        found = None
    return str(found) if found is not None and str(found) in SHIPPED_LOCALES else DEFAULT_LOCALE


def translate(request: Any, message: str, **values: object) -> str:
    """``message`` in the request's language, its placeholders filled: for words a handler
    puts on a page (a flash), which the template escapes."""
    text = translations(request_locale(request)).gettext(message)
    return text.format(**values) if values else text


def error_text(request: Any, error: BaseException) -> str:
    """What went wrong, for the page: a domain error's catalog message in the request's
    language (its placeholders filled), starting with a capital."""
    template = getattr(error, "template", "") or str(error)
    words = translations(request_locale(request))
    # A value that is itself a catalog message (a field's label) is read in the same language.
    values = {name: words.gettext(value) if isinstance(value, str) else value
              for name, value in (getattr(error, "values", {}) or {}).items()}
    text = translate(request, template, **values)
    return f"{text[:1].upper()}{text[1:]}"


def translate_plural(request: Any, singular: str, plural: str, count: int, **values: object) -> str:
    """The plural form for ``count`` in the request's language; ``{count}`` is the number."""
    locale = request_locale(request)
    text = translations(locale).ngettext(singular, plural, count)
    return text.format(count=formats_for(locale, "UTC").number(count), **values)


def context_locale(context: Context) -> str:
    return request_locale(context.get("request"))


def context_formats(context: Context) -> Formats:
    return formats_for(context_locale(context), request_zone(context.get("request")))


def _escaped(text: str) -> Markup:
    # A catalog's own words: &, <, > and " escaped (the portal quotes attributes with "), the
    # apostrophe kept as the reader's text has it ("can't"); every value is escaped in full.
    return Markup(text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
                  .replace('"', "&#34;"))


def _filled(text: str, values: dict[str, Any]) -> Markup:
    return _escaped(text).format(**values) if values else _escaped(text)


@pass_context
def gettext_markup(context: Context, message: str, /, **values: Any) -> Markup:
    return _filled(translations(context_locale(context)).gettext(message), values)


@pass_context
def ngettext_markup(context: Context, singular: str, plural: str, count: int, /, **values: Any) -> Markup:
    locale = context_locale(context)
    text = translations(locale).ngettext(singular, plural, count)
    return _filled(text, {"count": formats_for(locale, "UTC").number(count)} | values)


@pass_context
def page_direction(context: Context) -> str:
    return direction_of(context_locale(context))
