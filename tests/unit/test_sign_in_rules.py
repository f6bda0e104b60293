"""The sign-in decisions of domain/people/sign_in.py: allowed email domains, the issuer URL,
password sign-in off only with single sign-on set up, recovery codes as typed, and a plain
message for every refusal."""

from __future__ import annotations

import pytest

from domain.errors import InvalidInput
from domain.people.sign_in import (
    SignInRefusal,
    SignInSettings,
    email_domain_allowed,
    normalise_recovery_code,
    valid_domains,
    valid_issuer,
    valid_password_switch,
)


def test_allowed_domains_are_read_from_lines_commas_and_spaces_sorted_and_without_at_signs() -> None:
    assert valid_domains("Example.COM\n@tenant.example, other.example  example.com") == (
        "example.com", "other.example", "tenant.example")


@pytest.mark.parametrize("typed", ["not a domain", "localhost", "exa mple.com", "-bad.example"])
def test_something_that_is_not_an_email_domain_is_refused(typed: str) -> None:
    with pytest.raises(InvalidInput):
        valid_domains(typed)


def test_only_the_listed_domains_are_allowed_exactly_and_no_list_allows_nobody() -> None:
    allowed = ("tenant.example",)
    assert email_domain_allowed("Sam@Tenant.Example", allowed)
    assert not email_domain_allowed("sam@eu.tenant.example", allowed)  # a subdomain is another
    assert not email_domain_allowed("sam@tenant.example.evil", allowed)
    assert not email_domain_allowed("tenant.example", allowed)
    assert not email_domain_allowed("sam@tenant.example", ())


def test_an_issuer_is_an_http_url_kept_without_its_trailing_slash() -> None:
    assert valid_issuer(" https://login.example.com/realms/acme/ ") == "https://login.example.com/realms/acme"
    for bad in ("login.example.com", "ftp://login.example.com", "https://", "https://a b"):
        with pytest.raises(InvalidInput):
            valid_issuer(bad)


def test_password_sign_in_goes_off_only_while_single_sign_on_is_set_up() -> None:
    with pytest.raises(InvalidInput, match="single sign-on"):
        valid_password_switch(SignInSettings(oidc_issuer="https://i", oidc_client_id="c"),
                              password_enabled=False)
    valid_password_switch(SignInSettings(oidc_issuer="https://i", oidc_client_id="c", has_client_secret=True),
                          password_enabled=False)
    valid_password_switch(SignInSettings(), password_enabled=True)


def test_a_recovery_code_is_compared_without_case_spaces_or_dashes() -> None:
    assert normalise_recovery_code(" ABCDE-fghij 234 ") == "abcdefghij234"


def test_every_refusal_has_a_message_a_person_can_act_on() -> None:
    for reason in SignInRefusal:
        assert reason.message.endswith(".") and len(reason.message) > 20
