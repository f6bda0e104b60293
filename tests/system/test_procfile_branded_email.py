"""A branded German reminder under the Procfile's processes, judged from outside: the clock's
scan claims it, the worker renders and sends it, and the SES endpoint accepts it once, as one
multipart/alternative message whose text and HTML parts are both German and both branded."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

from babel.dates import format_date

from db.people.clients import create_client
from db.people.users import create_user
from db.platform.tenancy import Tenant, tenant_tx
from domain.people.identity import Role
from tests.integration.builders import PASSWORD
from tests.integration.conftest import SesOutbox, wait_until
from tests.support.procfile_stack import ProcfileStack
from tests.system.outcomes import RECOVERY_LIMIT, copies, statuses


def test_a_branded_german_reminder_is_accepted_once_as_multipart_with_both_parts(
    tenant: Tenant, ses: SesOutbox, procfile: Callable[..., ProcfileStack],
) -> None:
    procfile().start_all()
    expires = datetime.now(ZoneInfo(tenant.time_zone)).date() + timedelta(days=7)
    with tenant_tx(tenant.slug) as tx:
        tx.conn.execute(
            "INSERT INTO tenant_brand (display_name, colour, footer, default_locale) VALUES (%s, %s, %s, %s)",
            ["Nordlicht Compliance", "#0f5132", "Nordlicht GmbH, Hafenstraße 1, 20457 Hamburg", "de"])
        client = create_client(tx, "Elbe Logistik", expires)
        create_user(tx, "leitung@elbe.example", Role.CLIENT_USER, PASSWORD, client_id=client.id)

    wait_until(lambda: statuses(tenant) == Counter({"accepted": 1}), "the reminder accepted",
               RECOVERY_LIMIT)
    [(delivery_id, count)] = copies(ses, tenant).items()
    assert count == 1
    [email] = [m for m in ses.sent() if f"<delivery-{delivery_id}.{tenant.slug}@" in m.message_id]
    assert email.content_type == "multipart/alternative"
    assert email.subject == "Elbe Logistik: noch eine Woche bis zur Sperre des Zugangs"
    german_date = format_date(expires, format="long", locale="de")
    assert german_date in email.body and "Nordlicht GmbH, Hafenstraße 1" in email.body
    assert email.html is not None
    assert '<html lang="de" dir="ltr">' in email.html
    assert "Nordlicht Compliance" in email.html and "#0f5132" in email.html
    assert "Zugang verl&#228;ngern" in email.html  # 7bit: words outside ASCII as references
