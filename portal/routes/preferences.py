"""The preference centre (each member's own choices and clock) and the tenant admin's
defaults, locks and quiet-hours bypass. Every change saves on its own through htmx and
re-renders only its row with an inline confirmation or the error next to the field."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from litestar import get, post
from litestar.enums import RequestEncodingType
from litestar.params import Body, FromPath
from litestar.plugins.htmx import HTMXRequest
from litestar.response import Redirect, Template
from litestar.status_codes import HTTP_200_OK, HTTP_303_SEE_OTHER, HTTP_422_UNPROCESSABLE_ENTITY

from db.delivery.inbox import unread_count
from db.people.preferences import (
    CategoryDefault,
    CategoryLocked,
    CategoryPreference,
    category_defaults,
    delivery_schedule,
    preference_matrix,
    resolve_preference,
    save_category_default,
    save_schedule,
    save_user_preference,
)
from db.people.users import email_language, set_email_language
from db.platform.tenancy import tenant_tx
from domain.delivery.preferences import Frequency, Preference, valid_category, valid_frequency
from domain.delivery.quiet_hours import (
    DeliverySchedule,
    QuietHours,
    next_digest_instant,
    parse_local_time,
    valid_weekday,
    valid_zone_name,
    zone_names,
)
from domain.errors import InvalidInput, NotFound
from domain.messages import N_
from domain.people.identity import WHOLE_NUMBER, Role
from domain.people.locales import LOCALE_NAMES
from portal.auth import CurrentViewer, Viewer
from portal.language import error_text, translate
from portal.routes.chat import defaults_page_context, preference_centre_context
from tocsin.core.clock import utcnow

__all__ = [
    "FIELD_MAX_LENGTH",
    "FREQUENCY_LABELS",
    "ROUTES",
    "CategoryForm",
    "DefaultForm",
    "Form",
    "LanguageForm",
    "ScheduleForm",
    "preference_centre",
    "save_category",
    "save_delivery_schedule",
    "save_email_language",
    "save_tenant_default",
    "tenant_defaults",
]

FREQUENCY_LABELS = {  # translated where they are shown
    Frequency.INSTANT: N_("Straight away"),
    Frequency.DAILY_DIGEST: N_("Daily digest"),
    Frequency.WEEKLY: N_("Weekly digest"),
    Frequency.OFF: N_("Never"),
}
# domain.delivery.quiet_hours.WEEKDAYS in the catalogs' words (ISO order, Monday first)
WEEKDAY_NAMES = (N_("Monday"), N_("Tuesday"), N_("Wednesday"), N_("Thursday"), N_("Friday"),
                 N_("Saturday"), N_("Sunday"))
FIELD_MAX_LENGTH = 300  # characters; longer input is not a real zone, time or reason
Form = Body(media_type=RequestEncodingType.URL_ENCODED)


@dataclass
class CategoryForm:
    in_app: str = ""
    email: str = ""
    frequency: str = ""


@dataclass
class ScheduleForm:
    quiet_start: str = ""
    quiet_end: str = ""
    digest_time: str = "08:00"
    weekly_day: str = "1"
    time_zone: str = ""


@dataclass
class DefaultForm:
    in_app: str = ""
    email: str = ""
    frequency: str = ""
    critical: str = ""
    locked: str = ""
    lock_reason: str = ""


def _common(viewer: Viewer) -> dict[str, Any]:
    return {"viewer": viewer, "section": "preferences", "frequencies": list(Frequency),
            "frequency_labels": FREQUENCY_LABELS, "weekdays": WEEKDAY_NAMES}


def _schedule_context(schedule: DeliverySchedule, *, values: ScheduleForm | None = None,
                      errors: dict[str, str] | None = None, saved: bool = False) -> dict[str, Any]:
    if values is None:
        values = ScheduleForm(
            quiet_start=schedule.quiet.start.strftime("%H:%M") if schedule.quiet else "",
            quiet_end=schedule.quiet.end.strftime("%H:%M") if schedule.quiet else "",
            digest_time=schedule.digest_time.strftime("%H:%M"),
            weekly_day=str(schedule.weekly_day),
            time_zone=schedule.zone,
        )
    now = utcnow()
    return {
        "form": values, "errors": errors or {}, "saved": saved, "zones": zone_names(),
        "next_daily": next_digest_instant("daily", now, schedule),
        "next_weekly": next_digest_instant("weekly", now, schedule), "zone": schedule.zone,
    }


@get("/preferences", sync_to_thread=True)
def preference_centre(viewer: CurrentViewer) -> Template:
    with tenant_tx(viewer.tenant.slug) as tx:
        rows = preference_matrix(tx, viewer.user.id)
        schedule = delivery_schedule(tx, viewer.user.id)
        unread = unread_count(tx, viewer.user.id)
        language = email_language(tx, viewer.user.id)
        chat = preference_centre_context(tx, viewer.user.id)
    context = _common(viewer) | {"rows": rows, "schedule": _schedule_context(schedule), "unread": unread,
                                 "language": language or "", "languages": LOCALE_NAMES} | chat
    return Template("preferences.html", context=context)


@dataclass
class LanguageForm:
    locale: str = ""  # "" follows the organisation's language


@post("/preferences/language", sync_to_thread=True, status_code=HTTP_200_OK)
def save_email_language(
    request: HTMXRequest, viewer: CurrentViewer, data: Annotated[LanguageForm, Form]
) -> Template | Redirect:
    """The language of the viewer's next emails (an unknown one is a 400, by InvalidInput)."""
    with tenant_tx(viewer.tenant.slug) as tx:
        set_email_language(tx, viewer.user.id, data.locale or None)
    if not request.htmx:
        return Redirect("/preferences", status_code=HTTP_303_SEE_OTHER)
    # The page itself is now in another language: htmx reloads it (HX-Refresh).
    name = LOCALE_NAMES.get(data.locale) or translate(request, "the organisation's language")
    message = translate(request, "Saved: your next emails are in {name}.", name=name)
    return Template(template_str="<span role=\"status\">{{ message }}</span>",
                    context={"message": message}, headers={"HX-Refresh": "true"})


@post("/preferences/categories/{category:str}", sync_to_thread=True, status_code=HTTP_200_OK)
def save_category(
    request: HTMXRequest, viewer: CurrentViewer, category: FromPath[str],
    data: Annotated[CategoryForm, Form],
) -> Template | Redirect:
    category = valid_category(category)
    error = None
    with tenant_tx(viewer.tenant.slug) as tx:
        try:
            preference = Preference(data.in_app == "on", data.email == "on", valid_frequency(data.frequency))
            save_user_preference(tx, viewer.user.id, category, preference)
        except CategoryLocked as refused:
            error = str(refused)
        except InvalidInput as refused:
            error = f"{refused}; choose one from the list"
        row = CategoryPreference(category, resolve_preference(tx, viewer.user.id, category))
    if not request.htmx:
        return Redirect("/preferences", status_code=HTTP_303_SEE_OTHER)
    return Template(
        "_preference_row.html",
        context=_common(viewer) | {"row": row, "saved": error is None, "error": error},
        status_code=HTTP_422_UNPROCESSABLE_ENTITY if error else HTTP_200_OK,
    )


def _parse_schedule(request: Any, data: ScheduleForm) -> tuple[dict[str, Any], dict[str, str]]:
    values: dict[str, Any] = {}
    errors: dict[str, str] = {}
    if any(len(v) > FIELD_MAX_LENGTH for v in vars(data).values()):
        raise InvalidInput("that form was too long")
    start, end = data.quiet_start.strip(), data.quiet_end.strip()
    values["quiet"] = None
    if start or end:
        if not (start and end):
            errors["quiet_end" if start else "quiet_start"] = translate(
                request, "Give both a start and an end, or neither")
        else:
            times = {}
            for name, text, label in (("quiet_start", start, N_("The start")),
                                      ("quiet_end", end, N_("The end"))):
                try:
                    times[name] = parse_local_time(text, label)
                except InvalidInput as error:
                    errors[name] = error_text(request, error)
            if len(times) == 2:
                try:
                    values["quiet"] = QuietHours(times["quiet_start"], times["quiet_end"])
                except InvalidInput as error:
                    errors["quiet_end"] = error_text(request, error)
    for name, parse in (
        ("digest_time", lambda: parse_local_time(data.digest_time, N_("The digest time"))),
        ("weekly_day", lambda: valid_weekday(int(data.weekly_day) if WHOLE_NUMBER.fullmatch(data.weekly_day)
                                             else 0)),
        ("time_zone", lambda: valid_zone_name(data.time_zone)),
    ):
        try:
            values[name] = parse()
        except InvalidInput as error:
            errors[name] = error_text(request, error)
    return values, errors


@post("/preferences/schedule", sync_to_thread=True, status_code=HTTP_200_OK)
def save_delivery_schedule(
    request: HTMXRequest, viewer: CurrentViewer, data: Annotated[ScheduleForm, Form]
) -> Template | Redirect:
    values, errors = _parse_schedule(request, data)
    with tenant_tx(viewer.tenant.slug) as tx:
        if not errors:
            save_schedule(tx, viewer.user.id, quiet=values["quiet"], digest_time=values["digest_time"],
                          weekly_day=values["weekly_day"], zone=values["time_zone"])
        schedule = delivery_schedule(tx, viewer.user.id)
    if not request.htmx:
        return Redirect("/preferences", status_code=HTTP_303_SEE_OTHER)
    context = _schedule_context(schedule, values=data if errors else None, errors=errors, saved=not errors)
    return Template("_schedule_feedback.html", context=_common(viewer) | {"schedule": context},
                    status_code=HTTP_422_UNPROCESSABLE_ENTITY if errors else HTTP_200_OK)


def _require_admin(viewer: Viewer) -> None:
    if viewer.user.role is not Role.ADMIN:
        raise NotFound("only administrators manage the organisation's defaults")


@get("/preferences/defaults", sync_to_thread=True)
def tenant_defaults(viewer: CurrentViewer) -> Template:
    _require_admin(viewer)
    with tenant_tx(viewer.tenant.slug) as tx:
        defaults = category_defaults(tx)
        unread = unread_count(tx, viewer.user.id)
        chat = defaults_page_context(tx)
    return Template("preference_defaults.html",
                    context=_common(viewer) | {"defaults": defaults, "unread": unread} | chat)


@post("/preferences/defaults/{category:str}", sync_to_thread=True, status_code=HTTP_200_OK)
def save_tenant_default(
    request: HTMXRequest, viewer: CurrentViewer, category: FromPath[str],
    data: Annotated[DefaultForm, Form],
) -> Template | Redirect:
    _require_admin(viewer)
    category = valid_category(category)
    errors: dict[str, str] = {}
    with tenant_tx(viewer.tenant.slug) as tx:
        try:
            preference = Preference(data.in_app == "on", data.email == "on", valid_frequency(data.frequency))
            save_category_default(
                tx, category, preference, locked=data.locked == "on",
                lock_reason=data.lock_reason[:FIELD_MAX_LENGTH + 1], critical=data.critical == "on",
                by_user_id=viewer.user.id,
            )
        except InvalidInput as refused:
            field = "frequency" if "frequency" in str(refused) else "lock_reason"
            errors[field] = f"{str(refused)[:1].upper()}{str(refused)[1:]}"
        row = next(d for d in category_defaults(tx) if d.category == category)
    if not request.htmx:
        return Redirect("/preferences/defaults", status_code=HTTP_303_SEE_OTHER)
    if errors:  # show what was typed, not what is stored, next to the message
        row = CategoryDefault(category, row.preference, data.locked == "on", data.lock_reason,
                              data.critical == "on", row.customised)
    return Template(
        "_default_row.html",
        context=_common(viewer) | {"row": row, "saved": not errors, "errors": errors},
        status_code=HTTP_422_UNPROCESSABLE_ENTITY if errors else HTTP_200_OK,
    )

ROUTES = [preference_centre, save_category, save_delivery_schedule, tenant_defaults, save_tenant_default,
          save_email_language]
