"""Emails in the reader's language, through the real worker and the local SES endpoint: a
German client's user gets a German reminder with German dates in their own zone, as one
multipart/alternative message with both parts; choosing French in the preference centre
makes the next email French."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from email.header import decode_header, make_header

from babel.dates import format_date

from actors.email import deliver_email
from db.notices.fanout import prepare_claims
from db.notices.licence_scan import claim_due_milestones
from db.platform.tenancy import tenant_tx
from tests.integration.conftest import RunningWorker, SentEmail, SesOutbox
from tests.integration.portal_support import (
    HTMX,
    People,
    PortalClient,
    csrf_token,
    local_today,
    sign_in,
)


def _send_pending_to(people: People, worker: RunningWorker, ses: SesOutbox, email: str) -> SentEmail:
    with tenant_tx(people.tenant.slug) as tx:
        ids = [int(str(r[0])) for r in tx.conn.execute(
            "SELECT d.id FROM notification_deliveries d JOIN notifications n ON n.id = d.notification_id "
            "JOIN users u ON u.id = n.recipient_user_id WHERE u.email = %s AND d.status = 'pending'",
            [email]).fetchall()]
    assert len(ids) == 1
    before = {m.ses_id for m in ses.sent()}
    deliver_email.send(people.tenant.slug, *ids)
    worker.drain()
    [sent] = [m for m in ses.sent() if m.ses_id not in before]
    return sent


def test_a_german_clients_user_gets_a_german_reminder_and_french_after_choosing_french(
    people: People, worker: RunningWorker, ses: SesOutbox, portal: PortalClient
) -> None:
    slug, user = people.tenant.slug, people.client_user
    with tenant_tx(slug) as tx:
        tx.conn.execute("UPDATE clients SET locale = 'de' WHERE id = %s", [people.client.id])
        tx.conn.execute("UPDATE users SET time_zone = 'Europe/Berlin' WHERE id = %s", [user.id])
        tx.conn.execute("INSERT INTO tenant_brand (reply_to, sender_name) "
                        "VALUES ('help@northwind-tenant.example', 'Northwind Conformité')")
    due = people.client.access_expires_on

    german = _send_pending_to(people, worker, ses, user.email)
    assert german.subject == "Northwind Analytics: noch eine Woche bis zur Sperre des Zugangs"
    assert format_date(due, format="long", locale="de") in german.body  # "11. Dezember 2026"
    assert "Zugang verlängern: http" in german.body
    assert german.content_type == "multipart/alternative"
    assert german.html is not None and '<html lang="de" dir="ltr">' in german.html
    assert german.headers["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"
    assert german.headers["Reply-To"] == "help@northwind-tenant.example"  # the brand's
    # Its sender name, encoded as RFC 2047 words (not ASCII), on the configured address.
    assert german.headers["From"].isascii() and "=?utf-8?" in german.headers["From"]
    assert str(make_header(decode_header(german.headers["From"]))).startswith("Northwind Conformité <")
    # The admin has no client and no choice: the organisation's language (English).
    admin = _send_pending_to(people, worker, ses, people.admin.email)
    assert admin.subject == "Northwind Analytics: one week until access pauses"

    assert sign_in(portal, slug, user.email).status_code == 303
    page = portal.get("/preferences")
    assert 'name="locale"' in page.text
    saved = portal.post("/preferences/language", data={"locale": "fr", "_csrf_token": csrf_token(page.text)},
                        headers=HTMX)
    assert saved.status_code == 200 and "Français" in saved.text
    refused = portal.post("/preferences/language",
                          data={"locale": "xx", "_csrf_token": csrf_token(page.text)}, headers=HTMX)
    assert refused.status_code == 400

    # The next notice: the licence moved to tomorrow, so its d1 reminder is claimed.
    tomorrow = local_today(people.tenant) + timedelta(days=1)
    with tenant_tx(slug) as tx:
        tx.conn.execute("UPDATE clients SET access_expires_on = %s WHERE id = %s",
                        [tomorrow, people.client.id])
        claim_due_milestones(tx, datetime.now(UTC))
        prepare_claims(tx)
    french = _send_pending_to(people, worker, ses, user.email)
    assert french.subject == "Northwind Analytics : dernier jour avant la suspension de l\u2019accès"
    assert format_date(tomorrow, format="long", locale="fr") in french.body
    assert french.html is not None and '<html lang="fr" dir="ltr">' in french.html
