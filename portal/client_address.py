"""The address a request comes from, for the sign-in throttle: the connecting peer, unless
the peer is one of the configured trusted proxies (TRUSTED_PROXIES), in which case the
X-Forwarded-For list is read from the right, past every trusted proxy, to the first address
no trusted proxy vouches for. A client talking to the portal directly cannot choose its
address with the header: from an untrusted peer it is ignored.

The web process runs uvicorn with its own proxy-header handling off (tocsin.shell.processes), so
the peer seen here is the real socket peer.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

from tocsin.core.settings import ConfigError

__all__ = ["UNKNOWN", "IPNetwork", "client_address", "parse_trusted_proxies"]

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
UNKNOWN = "unknown"  # no peer at all (an in-process test client)


def parse_trusted_proxies(raw: str, name: str = "TRUSTED_PROXIES") -> tuple[IPNetwork, ...]:
    """Comma-separated addresses or networks (10.0.0.5, 10.0.0.0/8, ::1); empty: none."""
    networks = []
    for part in (p.strip() for p in raw.split(",")):
        if not part:
            continue
        try:
            networks.append(ipaddress.ip_network(part, strict=False))
        except ValueError:
            raise ConfigError(
                f"{name} takes addresses or networks separated by commas, such as "
                f"10.0.0.5,10.1.0.0/16; {part!r} is neither"
            ) from None
    return tuple(networks)


def _trusted(address: str, proxies: Iterable[IPNetwork]) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(ip in network for network in proxies)


def client_address(peer: str | None, forwarded_for: str | None, proxies: tuple[IPNetwork, ...]) -> str:
    """Who is asking, as the throttle counts them."""
    if not peer:
        return UNKNOWN
    address = peer
    if not proxies or not forwarded_for:
        return address
    hops = [hop.strip() for hop in forwarded_for.split(",")]
    while _trusted(address, proxies) and hops:
        hop = hops.pop()
        try:
            address = str(ipaddress.ip_address(hop))
        except ValueError:
            # A trusted proxy passed on something that is not an address: stop at the last
            # hop we can vouch for rather than count a made-up string.
            break
    return address
