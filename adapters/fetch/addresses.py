"""Which network addresses an import may connect to: policy only, no I/O.

A tenant names the source, so without this rule an import is a request forgery into the
platform's own network (the metadata service at 169.254.169.254, Redis, PostgreSQL, the
agents). Only public addresses are reachable, plus the networks an operator allows.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


def parse_networks(text: str) -> tuple[IPNetwork, ...]:
    """The operator's allow-list: comma-separated CIDRs (`127.0.0.0/8, ::1/128`)."""
    return tuple(
        ipaddress.ip_network(part.strip(), strict=False) for part in text.split(",") if part.strip()
    )


def refusal(address: IPAddress, allowed: Sequence[IPNetwork] = ()) -> str | None:
    """Why `address` may not be reached (a short phrase), or None when it may."""
    if any(address.version == net.version and address in net for net in allowed):
        return None
    # An IPv4 address written as IPv6 (::ffff:10.0.0.1) is judged as the IPv4 address.
    mapped = getattr(address, "ipv4_mapped", None)
    if mapped is not None:
        return refusal(mapped, allowed)
    if address.is_loopback:
        return "a loopback address"
    if address.is_link_local:
        return "a link-local address"
    if address.is_private:
        return "a private address"
    if not address.is_global:  # multicast, reserved, shared (100.64/10), unspecified
        return "an address that is not public"
    return None
