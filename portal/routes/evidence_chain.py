"""The evidence chain's page for administrators: the chain's head, the last verification
and its result, the key that signs checkpoints, and the latest signed checkpoints."""

from __future__ import annotations

from typing import Any

from litestar import Request, get
from litestar.response import Template

from db.delivery.inbox import unread_count
from db.evidence.activity import Activity, activity
from db.evidence.chain import chain_head
from db.evidence.checkpoints import checkpoints
from db.evidence.verifications import last_verification
from db.platform.tenancy import tenant_tx
from domain.errors import NotFound
from portal.auth import CurrentViewer
from portal.charts import Point, bar_chart
from tocsin.core.evidence_signing import CheckpointSigner, checkpoint_signer
from tocsin.core.settings import ConfigError, Settings

__all__ = ["CHECKPOINTS_SHOWN", "ROUTES", "charts_of", "evidence_chain"]

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


@get("/ledger/chain", sync_to_thread=True)
def evidence_chain(viewer: CurrentViewer, request: Request[Any, Any, Any]) -> Template:
    if not viewer.is_admin:
        raise NotFound("only administrators read the evidence pages")
    settings: Settings = request.app.state.settings
    with tenant_tx(viewer.tenant.slug) as tx:
        head = chain_head(tx)
        verification = last_verification(tx)
        recent = checkpoints(tx, limit=CHECKPOINTS_SHOWN)
        unread = unread_count(tx, viewer.user.id)
        figures = activity(tx)
    return Template(
        "evidence_chain.html",
        context={"viewer": viewer, "unread": unread, "section": "evidence", "head": head,
                 "verification": verification, "checkpoints": recent, "signer": _signer(settings),
                 "verify_hours": settings.evidence_verify_seconds / 3600, "charts": charts_of(figures)},
    )


ROUTES = [evidence_chain]
