"""Odd input through the real portal: each of these raised an unhandled error (a 500 behind
the friendly page). Now each is a 4xx with a message a person can act on, and nothing is
written."""

from __future__ import annotations

from tests.integration.builders import scalar
from tests.integration.portal_support import HTMX, People, PortalClient, csrf_token, signed_in

NON_ASCII_TOKENS = ["é.é", "eyJ0ZW5hbnQiOiJhIn0.sïg", "\u00b2.\u00b2", "токен.подпись"]


def test_a_non_ascii_invitation_token_is_refused_as_an_invalid_link(portal: PortalClient) -> None:
    token = csrf_token(portal.get("/login").text)
    for bad in NON_ASCII_TOKENS:
        page = portal.get(f"/invitations/{bad}")
        assert page.status_code == 400 and "This link is not valid" in page.text
        join = portal.post(f"/invitations/{bad}/join",
                           data={"_csrf_token": token, "password": "x" * 12, "confirm": "x" * 12})
        assert join.status_code == 400 and "This link is not valid" in join.text


def test_a_non_ascii_unsubscribe_token_is_refused_and_changes_no_preference(
    portal: PortalClient, people: People
) -> None:
    before = scalar(people.tenant, "SELECT count(*) FROM notification_preferences")
    for bad in NON_ASCII_TOKENS:
        for method in ("GET", "POST"):
            response = portal.request(method, f"/unsubscribe/{bad}",
                                      data={"List-Unsubscribe": "One-Click"} if method == "POST" else None)
            assert response.status_code == 400
            assert "This unsubscribe link is not valid" in response.text
    assert scalar(people.tenant, "SELECT count(*) FROM notification_preferences") == before


def test_an_option_an_unsubscribe_link_does_not_take_is_a_400_not_a_crash(portal: PortalClient) -> None:
    response = portal.get("/unsubscribe/abc.def", params={"utm_source": "mail"})
    assert response.status_code == 400 and "utm_source" in response.text


def test_digits_that_are_not_ascii_in_number_fields_are_refused_with_a_message(
    portal: PortalClient, people: People
) -> None:
    html = signed_in(portal, people, people.admin)
    token = csrf_token(html)
    for subject in ("\u00b2", "\u0663", "99999999999999999999"):
        ledger = portal.get("/ledger", params={"subject": subject})
        assert ledger.status_code == 400 and "client number, such as 42" in ledger.text

    users = scalar(people.tenant, "SELECT count(*) FROM users")
    for client_id in ("\u00b2", "\u0663", "99999999999999999999"):
        invited = portal.post("/members/invite", follow_redirects=False, data={
            "_csrf_token": token, "email": "odd@example.com", "role": "client_user",
            "client_id": client_id, "display_name": "Odd"})
        assert invited.status_code == 400 and "Choose a client organisation" in invited.text
    assert scalar(people.tenant, "SELECT count(*) FROM users") == users  # nothing written

    schedules = scalar(people.tenant, "SELECT count(*) FROM delivery_schedules")
    saved = portal.post("/preferences/schedule", headers=HTMX, data={
        "_csrf_token": token, "digest_time": "08:00", "weekly_day": "\u00b2",
        "time_zone": "Europe/London"})
    assert saved.status_code == 422 and "Pick a weekday" in saved.text
    assert scalar(people.tenant, "SELECT count(*) FROM delivery_schedules") == schedules



def test_a_value_of_the_wrong_kind_names_the_field_it_was_given_for(
    portal: PortalClient, people: People
) -> None:
    signed_in(portal, people, people.admin)
    for url, field in (("/inbox/feed?id=abc&created_at=2027-01-01T00:00:00Z", "id"),
                       ("/ledger?after_id=%C2%B2&after_at=2027-01-01T00:00:00Z", "after_id"),
                       ("/login?signed_out=maybe", "signed_out")):
        response = portal.get(url)
        assert response.status_code == 400
        assert f"We couldn\u2019t read \u201c{field}\u201d" in response.text
