"""The portal's budget settings: each read once, each failing loudly when out of bounds."""

from __future__ import annotations

import pytest

from portal.settings import INBOX_STREAM_MAXIMUM, load_portal_settings
from tocsin.core.settings import ConfigError

URL = "http://127.0.0.1:8000"


def test_a_stream_lifetime_above_the_maximum_stops_the_portal_from_starting() -> None:
    with pytest.raises(ConfigError, match=f"INBOX_STREAM_SECONDS must be at most {INBOX_STREAM_MAXIMUM}"):
        load_portal_settings(URL, {"INBOX_STREAM_SECONDS": str(INBOX_STREAM_MAXIMUM + 1)})
    at_most = load_portal_settings(URL, {"INBOX_STREAM_SECONDS": str(INBOX_STREAM_MAXIMUM)})
    assert at_most.inbox_stream_seconds == INBOX_STREAM_MAXIMUM


@pytest.mark.parametrize("name", [
    "INBOX_STREAMS_PER_USER", "INBOX_STREAMS_PER_PROCESS", "EXPORT_CONNECTIONS",
    "EXPORTS_PER_TENANT", "EXPORT_SECONDS", "EXPORT_STATEMENT_SECONDS", "PASSWORD_CHECKS_AT_ONCE",
])
def test_a_budget_of_zero_or_nonsense_names_the_variable(name: str) -> None:
    for bad in ("0", "many"):
        with pytest.raises(ConfigError, match=name):
            load_portal_settings(URL, {name: bad})


def test_the_defaults_are_bounded() -> None:
    settings = load_portal_settings(URL, {})
    assert settings.exports_per_tenant < settings.export_connections
    assert settings.inbox_streams_per_user < settings.inbox_streams_per_process
    assert settings.trusted_proxies == ()


def test_the_evidence_database_is_unset_by_default_must_be_postgresql_and_stays_out_of_the_repr() -> None:
    assert load_portal_settings(URL, {}).evidence_database_url is None
    with pytest.raises(ConfigError, match="EVIDENCE_DATABASE_URL must be a postgresql:// URL"):
        load_portal_settings(URL, {"EVIDENCE_DATABASE_URL": "mysql://replica/tocsin"})
    replica = "postgresql://reader:s3cret@replica.internal/tocsin"
    settings = load_portal_settings(URL, {"EVIDENCE_DATABASE_URL": replica})
    assert settings.evidence_database_url == replica
    assert "s3cret" not in repr(settings)


def test_the_api_rates_per_key_and_per_tenant_are_read_and_hold_a_whole_batch() -> None:
    settings = load_portal_settings(URL, {"API_EVENTS_PER_MINUTE": "1000",
                                          "API_TENANT_EVENTS_PER_MINUTE": "1500"})
    assert (settings.api_events_per_minute, settings.api_tenant_events_per_minute) == (1000, 1500)
    defaults = load_portal_settings(URL, {})
    assert defaults.api_tenant_events_per_minute >= defaults.api_events_per_minute
    for bad in ("499", "0", "lots"):  # a batch of 500 events must fit in a tenant's minute
        with pytest.raises(ConfigError, match="API_TENANT_EVENTS_PER_MINUTE"):
            load_portal_settings(URL, {"API_TENANT_EVENTS_PER_MINUTE": bad})
