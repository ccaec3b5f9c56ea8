"""Lists of addresses and networks read from a setting (trusted proxies, callback allow-lists): one way to read them."""

from __future__ import annotations

import ipaddress

__all__ = ["IPNetwork", "parse_networks"]

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


def parse_networks(raw: str, variable: str) -> tuple[IPNetwork, ...]:
    """A comma-separated list of addresses and networks (CIDR; an address is its own /32 or /128), host bits
    allowed; anything else is a ValueError naming ``variable`` (no entry is silently read as something else)."""
    nets = []
    for part in raw.split(","):
        if part.strip():
            try:
                nets.append(ipaddress.ip_network(part.strip(), strict=False))
            except ValueError as exc:
                raise ValueError(f"{variable}: {part.strip()!r} is not an address or a network: {exc}") from exc
    return tuple(nets)
