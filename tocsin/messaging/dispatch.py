"""The wake-up after commit: a committed tenant transaction's email deliveries are handed
to the email workers. Registered by `tocsin.core.runtime.start_messaging`; the transaction
(db/platform/tenancy.py) runs it once it has committed, whoever opened it (scan, sweep, digests,
a renewal or an invitation in the portal)."""

from __future__ import annotations

from actors.email import EMAILS_PER_MESSAGE, deliver_email
from db.platform.tenancy import TenantTx


def send_committed_emails(tx: TenantTx) -> None:
    """The rows were marked enqueued in the committed transaction; a send that fails here
    (Redis down) leaves them for the sweeper, which re-sends stale ones."""
    send_deliveries(tx.tenant.slug, tx.emails_to_send)


def send_deliveries(slug: str, delivery_ids: list[int]) -> None:
    """One deliver_email message per EMAILS_PER_MESSAGE deliveries of the tenant."""
    for start in range(0, len(delivery_ids), EMAILS_PER_MESSAGE):
        deliver_email.send(slug, *delivery_ids[start:start + EMAILS_PER_MESSAGE])
