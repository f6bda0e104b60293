"""The evidence chain's page: the chain's head, the last verification (sound or broken, with
the first broken record), the public signing key and the latest checkpoints; administrators only."""

from __future__ import annotations

from db.evidence.checkpoints import checkpoint_and_keep
from db.evidence.verifications import verify_and_record
from db.platform.tenancy import tenant_tx
from tests.integration.portal_support import People, PortalClient, signed_in
from tocsin.core import runtime
from tocsin.core.evidence_signing import checkpoint_signer


def test_the_page_shows_the_head_the_last_verification_the_key_and_the_checkpoints(
        portal: PortalClient, people: People) -> None:
    slug = people.tenant.slug
    signed_in(portal, people, people.admin)
    before = portal.get("/ledger/chain")
    assert before.status_code == 200 and "Not verified yet" in before.text

    verify_and_record(slug)
    checkpoint, _copy = checkpoint_and_keep(slug, "manual", runtime.settings())
    page = portal.get("/ledger/chain").text
    assert "The chain verifies." in page
    assert checkpoint_signer(runtime.settings()).public_key_hex in page
    assert checkpoint.head_hash in page and checkpoint.key_id in page
    for title in ("Claims per day", "Failed delivery attempts per day", "Deliveries by status",
                  "Median minutes from claim to delivery, per day of claim", "Claims per rule, last 14 days"):
        assert f"<caption>{title}</caption>" in page  # the table behind each chart
    assert page.count('<svg class="chart"') == 5 and '<th scope="row">licence</th><td>3</td>' in page

    with tenant_tx(slug) as tx:
        tx.conn.execute("UPDATE notification_ledger SET threshold = 'd1' "
                        "WHERE id = (SELECT min(id) FROM notification_ledger)")
    verify_and_record(slug)
    broken = portal.get("/ledger/chain").text
    assert "The chain is broken." in broken and "threshold is &#39;d1&#39;" in broken


def test_only_administrators_see_the_chain(portal: PortalClient, people: People) -> None:
    signed_in(portal, people, people.client_user)
    assert portal.get("/ledger/chain").status_code == 404
