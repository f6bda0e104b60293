"""The evidence chain's page for administrators: the chain's head, the last verification
and its result, the key that signs checkpoints, and the latest signed checkpoints."""

from __future__ import annotations

from typing import Any

from litestar import Request, get
from litestar.response import Template

from db.delivery.inbox import unread_count
from db.evidence.chain import chain_head
from db.evidence.checkpoints import checkpoints
from db.evidence.verifications import last_verification
from db.platform.tenancy import tenant_tx
from domain.errors import NotFound
from portal.auth import CurrentViewer
from tocsin.core.evidence_signing import CheckpointSigner, checkpoint_signer
from tocsin.core.settings import ConfigError, Settings

__all__ = ["CHECKPOINTS_SHOWN", "ROUTES", "evidence_chain"]

CHECKPOINTS_SHOWN = 10  # the latest checkpoints listed on the page


def _signer(settings: Settings) -> CheckpointSigner | None:
    try:
        return checkpoint_signer(settings)
    except ConfigError:  # a development secret outside the embedded services: no key at all
        return None


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
    return Template(
        "evidence_chain.html",
        context={"viewer": viewer, "unread": unread, "section": "evidence", "head": head,
                 "verification": verification, "checkpoints": recent, "signer": _signer(settings),
                 "verify_hours": settings.evidence_verify_seconds / 3600},
    )


ROUTES = [evidence_chain]
