"""Validation of what people type: slugs, zones, dates, instants, emails, roles, plans."""

from datetime import UTC, date, datetime

import pytest

from domain.errors import InvalidInput
from domain.people.identity import (
    Plan,
    Role,
    parse_date,
    parse_instant,
    schema_for,
    valid_email,
    valid_name,
    valid_plan,
    valid_role,
    valid_slug,
    valid_zone,
)


@pytest.mark.parametrize("slug", ["acme", "acme-eu", "a1", "big-co-2"])
def test_well_formed_slugs_are_accepted(slug: str) -> None:
    assert valid_slug(slug) == slug


@pytest.mark.parametrize(
    "slug", ["", "a", "Acme", "acme_eu", "1acme", "acme-", "-acme", "ac--me", "a" * 41, "acme eu",
             "acme;drop"]
)
def test_malformed_slugs_are_refused(slug: str) -> None:
    with pytest.raises(InvalidInput, match="invalid tenant slug"):
        valid_slug(slug)


def test_slugs_map_to_distinct_schemas() -> None:
    assert schema_for("acme-eu") == "t_acme_eu"
    assert schema_for("acmeeu") == "t_acmeeu"


@pytest.mark.parametrize("zone", ["Europe/London", "Pacific/Kiritimati", "UTC", "America/New_York"])
def test_iana_zones_are_accepted(zone: str) -> None:
    assert valid_zone(zone) == zone


@pytest.mark.parametrize("zone", ["Mars/Base", "", "europe/london", "GMT+25", "../etc/passwd"])
def test_unknown_zones_are_refused(zone: str) -> None:
    with pytest.raises(InvalidInput, match="unknown time zone"):
        valid_zone(zone)


def test_dates_must_be_iso_calendar_dates() -> None:
    assert parse_date("2027-03-31") == date(2027, 3, 31)
    for bad in ["2027-02-30", "31/03/2027", "2027-3-1", "tomorrow", ""]:
        with pytest.raises(InvalidInput, match="malformed date"):
            parse_date(bad)


def test_instants_need_an_offset_and_are_normalised_to_utc() -> None:
    assert parse_instant("2027-03-28T00:30:00+01:00") == datetime(2027, 3, 27, 23, 30, tzinfo=UTC)
    assert parse_instant("2027-03-28T00:30:00Z") == datetime(2027, 3, 28, 0, 30, tzinfo=UTC)
    with pytest.raises(InvalidInput, match="no UTC offset"):
        parse_instant("2027-03-28T00:30:00")
    with pytest.raises(InvalidInput, match="malformed instant"):
        parse_instant("yesterday")


def test_emails_roles_plans_and_names() -> None:
    assert valid_email(" Ops@Example.COM ") == "ops@example.com"
    with pytest.raises(InvalidInput):
        valid_email("not-an-email")
    assert valid_role("client_user") is Role.CLIENT_USER
    with pytest.raises(InvalidInput, match="unknown role"):
        valid_role("owner")
    assert valid_plan("enterprise") is Plan.ENTERPRISE
    with pytest.raises(InvalidInput, match="unknown plan"):
        valid_plan("gold")
    with pytest.raises(InvalidInput):
        valid_name("   ")
    with pytest.raises(InvalidInput):
        valid_name("x" * 201)
    for control in ("\x00", "\t", "\x1b", "\x85"):
        with pytest.raises(InvalidInput, match="control characters"):
            valid_name(f"case{control}system", "key label")
    assert valid_name(" Lina Ødegård, Compliance ") == "Lina Ødegård, Compliance"
