"""Invitation and unsubscribe tokens never reach a log: the portal runs as a real process
(`tocsin web`, as the Procfile runs it, and uvicorn's factory, as the tests serve it), the
links are visited, and the tokens are absent from everything it wrote."""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from db.events.api_keys import create_api_key
from db.people.members import invite_member
from db.platform.tenancy import tenant_tx
from domain.delivery.unsubscribe import unsubscribe_token
from domain.people.identity import Role
from portal.redaction import REDACTED, install_log_redaction, redact
from tests.integration.conftest import WAIT_LIMIT
from tests.integration.portal_support import People
from tests.support.portal_server import serve_portal
from tocsin.core.keys import signing_keys
from tocsin.core.settings import load_settings


def _status(url: str, data: bytes | None = None) -> int:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=data), timeout=WAIT_LIMIT) as r:
            return int(r.status)
    except urllib.error.HTTPError as error:
        return error.code


def _tokens(people: People) -> tuple[str, str]:
    keys = signing_keys(load_settings())
    now = datetime.now(UTC)
    with tenant_tx(people.tenant.slug) as tx:
        invitation = invite_member(tx, "invitee@example.com", Role.MEMBER, people.admin.id,
                                   key=keys.invitation.current, expires_at=now + timedelta(days=7))
    return invitation.token, unsubscribe_token(keys.unsubscribe.current, people.tenant.slug,
                                               people.admin.id, "license_expiring", now)


@pytest.mark.parametrize("launcher", ["tocsin web", "uvicorn factory"])
def test_invitation_and_unsubscribe_tokens_are_redacted_from_the_portals_log(
    people: People, tmp_path: Path, launcher: str
) -> None:
    invitation, unsubscribe = _tokens(people)
    log_path = tmp_path / "web.log"
    serve = serve_portal(log_path, as_procfile=launcher == "tocsin web")
    with serve as url:
        assert _status(f"{url}/invitations/{invitation}") == 200  # the link works ...
        assert _status(f"{url}/invitations/{invitation}/join", data=b"password=x") == 403  # no CSRF
        assert _status(f"{url}/unsubscribe/{unsubscribe}") == 200
        assert _status(f"{url}/unsubscribe/{unsubscribe}?x=1") == 400  # an unknown option
    log = log_path.read_text()
    assert f"/invitations/{REDACTED}" in log and f"/unsubscribe/{REDACTED}" in log  # ... and was logged
    assert f"/invitations/{REDACTED}/join" in log
    for token in (invitation, unsubscribe):
        assert token not in log
        assert token.split(".")[1] not in log  # not even the signature half


def test_redaction_covers_every_logger_and_argument_shape(caplog: pytest.LogCaptureFixture) -> None:
    install_log_redaction()
    with caplog.at_level(logging.INFO):
        logging.getLogger("tocsin.anything").info("GET %s", "/invitations/abc.def?x=1")
        logging.getLogger("uvicorn.access").info('%s - "%s %s"', "1.2.3.4", "GET", "/unsubscribe/xyz.uvw")
        logging.getLogger("tocsin.anything").warning("visited /Unsubscribe/tok.en/ twice")
    text = caplog.text
    assert "abc.def" not in text and "xyz.uvw" not in text and "tok.en" not in text
    assert text.count(REDACTED) == 3
    assert redact("/invitations%2Fsecret.sig") == f"/invitations%2F{REDACTED}"
    assert redact("/inbox?id=3") == "/inbox?id=3"


def _post_json(url: str, body: dict[str, object]) -> tuple[int, dict[str, object]]:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=WAIT_LIMIT) as r:
            return int(r.status), json.loads(r.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


@pytest.mark.parametrize("launcher", ["tocsin web", "uvicorn factory"])
def test_an_api_key_sent_in_the_query_string_is_refused_and_never_logged(
    people: People, tmp_path: Path, launcher: str
) -> None:
    key = create_api_key(people.tenant.slug, "careless host")[1]
    log_path = tmp_path / "web.log"
    with serve_portal(log_path, as_procfile=launcher == "tocsin web") as url:
        for name in ("api_key", "key", "token", "API_KEY"):
            status, answer = _post_json(f"{url}/api/v1/events?{name}={key}", {"product": "fraud"})
            assert status == 400
            assert "Authorization: Bearer <key>" in str(answer["message"])
        assert _status(f"{url}/login?token={key}") == 400  # the portal's pages take no such option
        assert _status(f"{url}/api/v1/events?x=1&access_token={key}", data=b"{}") == 400
    log = log_path.read_text()
    assert "/api/v1/events?api_key=[redacted]" in log  # the request was logged ...
    assert key not in log and key.removeprefix("tsk_") not in log  # ... without its key


def test_query_credentials_are_redacted_whatever_logs_them(caplog: pytest.LogCaptureFixture) -> None:
    install_log_redaction()
    with caplog.at_level(logging.INFO):
        logging.getLogger("uvicorn.access").info('%s - "%s %s HTTP/1.1" %d', "1.2.3.4", "POST",
                                                 "/api/v1/events?api_key=tsk_secret1&x=2", 400)
        logging.getLogger("tocsin.anything").warning("retrying /x?Token=secret2#frag")
        logging.getLogger("tocsin.anything").warning("%(url)s", {"url": "/y?a=1&key=secret3"})
    text = caplog.text
    assert "secret1" not in text and "secret2" not in text and "secret3" not in text
    assert "api_key=[redacted]&x=2" in text and "Token=[redacted]#frag" in text
    assert redact("/a?monkey=1&keys=2&api%5Fkey=s") == "/a?monkey=1&keys=2&api%5Fkey=[redacted]"
