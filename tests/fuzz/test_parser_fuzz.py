"""The token and SNS parsers under generated input, directly (they may only refuse with
their own error) and through the portal (invitation and unsubscribe links, the SES hook),
where every refusal is a 4xx."""

from __future__ import annotations

import json
from contextlib import suppress
from datetime import UTC, datetime, timedelta
from urllib.parse import quote

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from domain.delivery.sns_messages import SnsTrust, Untrusted, check_envelope, load_sns_json, parse_ses_event
from domain.delivery.unsubscribe import read_unsubscribe_token, unsubscribe_token
from domain.errors import InvalidInput
from domain.tokens import sign, verify
from tests.fuzz.budget import is_server_error, share
from tests.fuzz.client import FuzzClient
from tests.fuzz.values import ANY_TEXT, TRICKY
from tests.integration.portal_support import People, PortalClient
from tests.support.sns_signer import SnsSigner, ses_event
from tocsin.core.keys import signing_keys
from tocsin.core.settings import load_settings

NOW = datetime(2027, 1, 1, 12, 0, tzinfo=UTC)
KEY = b"fuzz-key-fuzz-key-fuzz-key-32byt"  # a signing key, as tocsin.core.keys derives them
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | ANY_TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(ANY_TEXT, inner, max_size=4),
    max_leaves=12,
)
QUICK = settings(deadline=None, database=None, max_examples=300,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@st.composite
def tampered_tokens(draw: st.DrawFn) -> str:
    """Real tokens cut, spliced and sprinkled with any character, and any text at all."""
    genuine = unsubscribe_token(KEY, "acme", 7, "license_expiring", NOW)
    at = draw(st.integers(0, len(genuine)))
    mutated = genuine[:at] + draw(ANY_TEXT) + genuine[at + draw(st.integers(0, 3)):]
    return draw(st.sampled_from([mutated, genuine[:at]])) if draw(st.booleans()) else draw(
        st.one_of(ANY_TEXT, st.sampled_from(TRICKY)))


@QUICK
@given(token=tampered_tokens())
def test_token_parsers_refuse_anything_but_a_genuine_token_with_their_own_error(token: str) -> None:
    genuine = unsubscribe_token(KEY, "acme", 7, "license_expiring", NOW)
    try:
        read_unsubscribe_token([KEY], token, NOW)
    except InvalidInput:
        assert token != genuine
    with suppress(InvalidInput):
        verify([KEY], "invite", token, NOW)
    minted = sign(KEY, "invite", {"n": 1}, NOW + timedelta(days=1))
    assert verify([KEY], "invite", minted, NOW) == {"n": 1}


@st.composite
def envelopes(draw: st.DrawFn) -> object:
    """SNS-shaped dicts with any field missing, replaced or of the wrong type, and any JSON."""
    base: dict[str, object] = {
        "Type": draw(st.sampled_from(
            ["Notification", "SubscriptionConfirmation", "UnsubscribeConfirmation"])),
        "MessageId": "m-1", "TopicArn": "arn:aws:sns:eu-west-1:123456789012:t",
        "Message": json.dumps(draw(JSON)), "Timestamp": "2027-01-01T11:59:00Z", "SignatureVersion": "2",
        "Signature": "c2ln", "SigningCertURL": "https://sns.eu-west-1.amazonaws.com/x.pem", "Token": "t",
        "SubscribeURL": "https://sns.eu-west-1.amazonaws.com/?Action=ConfirmSubscription"
                        "&TopicArn=arn:aws:sns:eu-west-1:123456789012:t",
    }
    for name in draw(st.lists(st.sampled_from(sorted(base)), unique=True, max_size=4)):
        if draw(st.booleans()):
            del base[name]
        else:
            base[name] = draw(st.one_of(JSON, st.sampled_from(TRICKY)))
    return base if draw(st.integers(0, 9)) else draw(JSON)


@QUICK
@given(message=envelopes())
def test_the_envelope_check_refuses_with_untrusted_and_never_crashes(message: object) -> None:
    trust = SnsTrust(frozenset({"arn:aws:sns:eu-west-1:123456789012:t"}))
    with suppress(Untrusted):
        check_envelope(message, trust, NOW)


@QUICK
@given(body=st.dictionaries(
    st.sampled_from(["eventType", "notificationType", "mail", "bounce", "complaint"]),
    JSON | st.fixed_dictionaries({"tags": JSON, "messageId": JSON, "timestamp": JSON})))
def test_ses_event_parsing_returns_an_event_or_none_for_any_json(body: dict[str, object]) -> None:
    parse_ses_event(body)


def test_the_sns_json_reader_refuses_any_bytes_with_untrusted() -> None:
    @QUICK
    @given(raw=st.binary(max_size=200) | st.sampled_from([b"[" * 10_000, b'{"a":' * 10_000]))
    def read(raw: bytes) -> None:
        with suppress(Untrusted):
            load_sns_json(raw)

    read()


def test_no_generated_token_or_sns_message_gets_a_server_error_from_the_portal(
    sns_signer: SnsSigner, portal: PortalClient, people: People
) -> None:
    client = FuzzClient(portal, people)
    key = signing_keys(load_settings()).unsubscribe.current
    genuine = unsubscribe_token(key, people.tenant.slug, people.admin.id, "license_expiring",
                                datetime.now(UTC))

    @st.composite
    def sns_bodies(draw: st.DrawFn) -> bytes:
        """A genuinely signed message from the allowed topic with a generated SES event in it,
        any envelope-shaped JSON, or any bytes."""
        kind = draw(st.integers(0, 2))
        if kind == 0:
            event = ses_event(draw(st.sampled_from(["Delivery", "Bounce", "Complaint", "Reject", "Open"])),
                              people.tenant.slug, draw(st.integers(-1, 50)), draw(ANY_TEXT))
            event["mail"] = {**event["mail"], **draw(st.dictionaries(  # type: ignore[dict-item]
                st.sampled_from(["tags", "messageId", "timestamp"]), JSON, max_size=1))}
            return json.dumps(sns_signer.notification(event)).encode()
        if kind == 1:
            return json.dumps(draw(envelopes())).encode()
        return draw(st.binary(max_size=300))

    @settings(max_examples=share(0.2), deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(token=tampered_tokens() | st.just(genuine), which=st.integers(0, 4), sns=sns_bodies())
    def send(token: str, which: int, sns: bytes) -> None:
        quoted = quote(token, safe="") or "x"
        method, path, form, content = [
            ("GET", f"/invitations/{quoted}", None, None),
            ("POST", f"/invitations/{quoted}/join", {"password": token, "confirm": token}, None),
            ("GET", f"/unsubscribe/{quoted}", None, None),
            ("POST", f"/unsubscribe/{quoted}", {"List-Unsubscribe": "One-Click"}, None),
            ("POST", "/hooks/ses", None, sns),
        ][which]
        response = client.send(method, path, form=form, content=content)
        assert not is_server_error(path, response.status_code), f"{method} {path} {content!r}"[:2000]

    send()
    # The signed messages above could reach the handler: a genuine one is accepted.
    genuine_event = json.dumps(sns_signer.notification({"eventType": "Open", "mail": {}})).encode()
    assert client.send("POST", "/hooks/ses", content=genuine_event).status_code == 200


SVG_PARTS = st.sampled_from([
    b'<svg xmlns="http://www.w3.org/2000/svg">', b"</svg>", b"<script>", b'onload="x()"', b"<!DOCTYPE",
    b'<image href="https://x.example/a.png"/>', b"<style>@import url(a);</style>", b"<rect/>",
    b"\x89PNG\r\n\x1a\n", b"\xff\xd8\xff", b"<?xml version='1.0'?>", b"&", b"<", b"\x00"])


@QUICK
@given(data=st.one_of(st.binary(max_size=300), st.lists(SVG_PARTS, max_size=8).map(b"".join)),
       declared=st.sampled_from(["image/png", "image/jpeg", "image/svg+xml", "", "text/html"]))
def test_the_logo_check_refuses_any_bytes_with_its_own_error(data: bytes, declared: str) -> None:
    from domain.people.brand import check_logo

    with suppress(InvalidInput):
        logo = check_logo(data, declared)
        assert logo.content_type in ("image/png", "image/jpeg", "image/svg+xml")
        if logo.content_type == "image/svg+xml":
            assert b"<script" not in data.lower()  # as an element it is refused, as text it cannot parse
