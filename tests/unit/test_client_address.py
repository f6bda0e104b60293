"""Which address the sign-in throttle counts: X-Forwarded-For only from trusted proxies."""

from __future__ import annotations

import pytest

from portal.client_address import UNKNOWN, client_address, parse_trusted_proxies
from tocsin.core.settings import ConfigError

PROXIES = parse_trusted_proxies("10.0.0.5, 10.1.0.0/16")


def test_a_direct_client_is_its_peer_whatever_it_writes_in_the_header() -> None:
    assert client_address("203.0.113.7", "198.51.100.1", PROXIES) == "203.0.113.7"
    assert client_address("127.0.0.1", "198.51.100.1", ()) == "127.0.0.1"


def test_behind_trusted_proxies_the_first_untrusted_hop_from_the_right_is_the_client() -> None:
    # The client wrote 1.2.3.4 itself; the first proxy saw 198.51.100.1; the second, trusted,
    # saw the first (also trusted).
    assert client_address("10.0.0.5", "1.2.3.4, 198.51.100.1, 10.1.2.3", PROXIES) == "198.51.100.1"


def test_a_garbled_hop_stops_at_the_last_address_a_proxy_vouched_for() -> None:
    assert client_address("10.0.0.5", "not-an-address", PROXIES) == "10.0.0.5"
    assert client_address("10.0.0.5", "", PROXIES) == "10.0.0.5"


def test_no_peer_is_unknown() -> None:
    assert client_address(None, "198.51.100.1", PROXIES) == UNKNOWN


def test_a_malformed_trusted_proxy_setting_fails_loudly() -> None:
    with pytest.raises(ConfigError, match="TRUSTED_PROXIES"):
        parse_trusted_proxies("10.0.0.5, proxy.internal")
    assert parse_trusted_proxies("") == ()
