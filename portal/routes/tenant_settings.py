"""Organisation settings, for the tenant's administrators: what Tocsin does when an email's
outcome is unknown (the provider may or may not have it), with the trade-off beside each
choice. The same use case as `tocsin tenant unknown-outcome` (db/platform/tenancy.py). And the
evidence settings: the compliance address that receives every signed checkpoint, and how long
message bodies and addresses are kept (db/evidence/settings.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from litestar import get, post
from litestar.enums import RequestEncodingType
from litestar.params import Body, QueryParameter
from litestar.response import Redirect, Template
from litestar.status_codes import HTTP_303_SEE_OTHER, HTTP_400_BAD_REQUEST

from db.delivery.inbox import unread_count
from db.evidence.settings import (
    MAX_RETENTION_DAYS,
    EvidenceSettings,
    evidence_settings,
    set_evidence_settings,
)
from db.platform.tenancy import set_unknown_outcome_policy, tenant_tx
from domain.delivery.states import UnknownPolicy
from domain.errors import InvalidInput, NotFound
from domain.messages import N_
from domain.people.identity import parse_whole_number
from portal.auth import CurrentViewer, Viewer

__all__ = [
    "DONE", "ROUTES", "EvidenceForm", "PolicyForm", "change_evidence_settings", "change_unknown_outcome",
    "settings_page",
]

DONE = {"unknown-outcome": N_("Saved. It applies to every unknown outcome from now on."),
        "evidence": N_("Saved. Checkpoints signed from now on go to the compliance address, and the "
                       "retention applies from the next nightly pass.")}


def _admin(viewer: Viewer) -> Viewer:
    if not viewer.is_admin:
        raise NotFound("only administrators change the organisation's settings")
    return viewer


@get("/settings", sync_to_thread=True)
def settings_page(
    viewer: CurrentViewer, done: Annotated[str | None, QueryParameter(max_length=20)] = None
) -> Template:
    _admin(viewer)
    return _page(viewer, DONE.get(done or ""))


def _page(viewer: Viewer, notice: str | None, evidence_form: EvidenceForm | None = None,
          error: str | None = None, status_code: int = 200) -> Template:
    with tenant_tx(viewer.tenant.slug) as tx:
        unread = unread_count(tx, viewer.user.id)
        policy = tx.tenant.unknown_outcome_policy  # read now, not from the session's copy
        evidence = evidence_settings(tx)
    return Template(
        "settings.html", status_code=status_code,
        context={"viewer": viewer, "unread": unread, "section": "settings", "policy": policy,
                 "policies": list(UnknownPolicy), "notice": notice,
                 "evidence": evidence_form or EvidenceForm.of(evidence), "evidence_error": error,
                 "max_retention_days": MAX_RETENTION_DAYS},
    )


@dataclass
class PolicyForm:
    policy: str = ""


@post("/settings/unknown-outcome", sync_to_thread=True)
def change_unknown_outcome(
    viewer: CurrentViewer, data: Annotated[PolicyForm, Body(media_type=RequestEncodingType.URL_ENCODED)]
) -> Redirect:
    _admin(viewer)
    set_unknown_outcome_policy(viewer.tenant.slug, data.policy[:20])
    return Redirect("/settings?done=unknown-outcome", status_code=HTTP_303_SEE_OTHER)


@dataclass
class EvidenceForm:
    compliance_email: str = ""
    retention_days: str = ""

    @classmethod
    def of(cls, settings: EvidenceSettings) -> EvidenceForm:
        return cls(settings.compliance_email or "",
                   "" if settings.retention_days is None else str(settings.retention_days))


@post("/settings/evidence", sync_to_thread=True)
def change_evidence_settings(
    viewer: CurrentViewer, data: Annotated[EvidenceForm, Body(media_type=RequestEncodingType.URL_ENCODED)]
) -> Redirect | Template:
    _admin(viewer)
    form = EvidenceForm(data.compliance_email.strip()[:320], data.retention_days.strip()[:10])
    try:
        days = parse_whole_number(form.retention_days, "the retention is a number of days, such as 365") \
            if form.retention_days else None
        with tenant_tx(viewer.tenant.slug) as tx:
            set_evidence_settings(tx, form.compliance_email or None, days)
    except InvalidInput as refused:
        return _page(viewer, None, form, str(refused), HTTP_400_BAD_REQUEST)
    return Redirect("/settings?done=evidence#evidence-title", status_code=HTTP_303_SEE_OTHER)


ROUTES = [settings_page, change_unknown_outcome, change_evidence_settings]
