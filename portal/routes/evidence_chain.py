"""The evidence chain's page for administrators: the chain's head, the last verification
and its result, the key that signs checkpoints, the latest signed checkpoints, and the form
that exports an evidence pack (the same use case as `tocsin evidence export`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from litestar import Request, Response, get, post
from litestar.enums import RequestEncodingType
from litestar.params import Body
from litestar.response import Template
from litestar.status_codes import HTTP_200_OK, HTTP_400_BAD_REQUEST

from db.delivery.inbox import unread_count
from db.evidence.activity import Activity, activity
from db.evidence.chain import chain_head
from db.evidence.checkpoints import checkpoints
from db.evidence.export_budget import ExportBudget
from db.evidence.pack import PackSelection, build_pack
from db.evidence.verifications import last_verification
from db.platform.tenancy import tenant_tx
from db.rules.definitions import list_rules
from domain.errors import InvalidInput, NotFound
from domain.people.identity import parse_date, parse_whole_number
from portal.auth import CurrentViewer, Viewer
from portal.charts import Point, bar_chart
from tocsin.core.clock import utcnow
from tocsin.core.evidence_signing import CheckpointSigner, checkpoint_signer
from tocsin.core.settings import ConfigError, Settings

__all__ = ["CHECKPOINTS_SHOWN", "ROUTES", "PackForm", "charts_of", "evidence_chain", "export_pack"]

CHECKPOINTS_SHOWN = 10  # the latest checkpoints listed on the page


def _signer(settings: Settings) -> CheckpointSigner | None:
    try:
        return checkpoint_signer(settings)
    except ConfigError:  # a development secret outside the embedded services: no key at all
        return None


def charts_of(figures: Activity) -> list[dict[str, Any]]:
    """Each chart with the rows of the table behind it (the same points)."""
    days = [f"{d:%d %b}" for d in figures.days]
    series = [
        ("claims-per-day", "Claims per day", "Day", "Claims", "",
         [Point(d, v) for d, v in zip(days, figures.claims_per_day, strict=True)]),
        ("failures-per-day", "Failed delivery attempts per day", "Day", "Failed attempts", "failures",
         [Point(d, v) for d, v in zip(days, figures.failures_per_day, strict=True)]),
        ("minutes-to-delivery", "Median minutes from claim to delivery, per day of claim", "Day",
         "Median minutes", "",
         [Point(d, v or 0.0) for d, v in zip(days, figures.median_minutes_to_delivery, strict=True)]),
        ("deliveries-by-status", "Deliveries by status", "Status", "Deliveries", "",
         [Point(s, n) for s, n in figures.deliveries_by_status]),
        ("claims-per-rule", f"Claims per rule, last {len(days)} days", "Rule", "Claims", "",
         [Point(r, n) for r, n in figures.claims_per_rule]),
    ]
    return [{"id": cid, "title": title, "label_head": lh, "value_head": vh, "kind": kind,
             "svg": bar_chart(cid, title, points), "points": points}
            for cid, title, lh, vh, kind, points in series]


@dataclass
class PackForm:
    """The export form's fields, as typed (dates YYYY-MM-DD, a client number, a rule)."""

    claimed_from: str = ""
    claimed_to: str = ""
    client: str = ""
    rule: str = ""

    def selection(self) -> PackSelection:
        client = self.client.strip()
        return PackSelection(
            claimed_from=parse_date(self.claimed_from.strip()) if self.claimed_from.strip() else None,
            claimed_to=parse_date(self.claimed_to.strip()) if self.claimed_to.strip() else None,
            client_id=parse_whole_number(client, "the client is a client number, such as 42")
            if client else None,
            rule=self.rule.strip() or None)


def _admin(viewer: Viewer) -> Viewer:
    if not viewer.is_admin:
        raise NotFound("only administrators read the evidence pages")
    return viewer


def _page(viewer: Viewer, settings: Settings, form: PackForm, error: str | None = None,
          status_code: int = 200) -> Template:
    with tenant_tx(viewer.tenant.slug) as tx:
        head = chain_head(tx)
        verification = last_verification(tx)
        recent = checkpoints(tx, limit=CHECKPOINTS_SHOWN)
        unread = unread_count(tx, viewer.user.id)
        figures = activity(tx)
        rules = list_rules(tx)
    return Template(
        "evidence_chain.html", status_code=status_code,
        context={"viewer": viewer, "unread": unread, "section": "evidence", "head": head,
                 "verification": verification, "checkpoints": recent, "signer": _signer(settings),
                 "verify_hours": settings.evidence_verify_seconds / 3600, "charts": charts_of(figures),
                 "rules": rules, "form": form, "error": error},
    )


@get("/ledger/chain", sync_to_thread=True)
def evidence_chain(viewer: CurrentViewer, request: Request[Any, Any, Any]) -> Template:
    _admin(viewer)
    return _page(viewer, request.app.state.settings, PackForm())


@post("/ledger/chain/export", sync_to_thread=True)
def export_pack(
    viewer: CurrentViewer, request: Request[Any, Any, Any],
    data: Annotated[PackForm, Body(media_type=RequestEncodingType.URL_ENCODED)],
) -> Response[bytes] | Template:
    """The evidence pack as a ZIP download; a refused selection re-renders the page with the
    reason beside the form. The pack signs (and keeps) a checkpoint and is audited."""
    _admin(viewer)
    settings: Settings = request.app.state.settings
    form = PackForm(data.claimed_from[:10], data.claimed_to[:10], data.client[:20], data.rule[:40])
    budget: ExportBudget = request.app.state["export_budget"]
    signer = _signer(settings)
    if signer is None:
        return _page(viewer, settings, form, "No signing key: a pack cannot be signed. Ask whoever "
                     "runs Tocsin to set SESSION_SECRET.", HTTP_400_BAD_REQUEST)
    slot = budget.reserve(viewer.tenant.slug)  # bounds the packs built at once, like the CSVs
    try:
        pack, _manifest = build_pack(viewer.tenant.slug, form.selection(), signer)
    except InvalidInput as refused:
        return _page(viewer, settings, form, str(refused), HTTP_400_BAD_REQUEST)
    finally:
        slot.release()
    stamp = utcnow().strftime("%Y%m%d-%H%M%S")
    return Response(pack, status_code=HTTP_200_OK, media_type="application/zip", headers={
        "Content-Disposition": f'attachment; filename="tocsin-evidence-{viewer.tenant.slug}-{stamp}.zip"'})


ROUTES = [evidence_chain, export_pack]
