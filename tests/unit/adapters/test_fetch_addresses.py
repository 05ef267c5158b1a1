"""The address rule of imports: only public addresses, plus what the operator allows."""

from __future__ import annotations

from ipaddress import IPv4Address, ip_address

from hypothesis import given
from hypothesis import strategies as st

from loraplex.adapters.fetch import parse_networks, refusal


def test_the_cloud_metadata_address_is_refused_as_link_local() -> None:
    assert refusal(ip_address("169.254.169.254")) == "a link-local address"


def test_loopback_private_and_shared_addresses_are_refused() -> None:
    assert refusal(ip_address("127.0.0.1")) == "a loopback address"
    assert refusal(ip_address("::1")) == "a loopback address"
    assert refusal(ip_address("10.1.2.3")) == "a private address"
    assert refusal(ip_address("fd00::1")) == "a private address"
    assert refusal(ip_address("100.64.0.1")) == "an address that is not public"
    assert refusal(ip_address("0.0.0.0")) is not None


def test_an_ipv4_address_written_as_ipv6_is_judged_as_ipv4() -> None:
    assert refusal(ip_address("::ffff:10.0.0.1")) == "a private address"
    assert refusal(ip_address("::ffff:8.8.8.8")) is None


def test_public_addresses_pass() -> None:
    assert refusal(ip_address("8.8.8.8")) is None
    assert refusal(ip_address("2606:4700:4700::1111")) is None


def test_the_allow_list_lets_its_networks_through_and_nothing_else() -> None:
    allowed = parse_networks(" 127.0.0.0/8, ::1/128 ,10.5.0.0/16")
    assert refusal(ip_address("127.0.0.1"), allowed) is None
    assert refusal(ip_address("::1"), allowed) is None
    assert refusal(ip_address("10.5.9.9"), allowed) is None
    assert refusal(ip_address("10.6.0.1"), allowed) == "a private address"
    assert refusal(ip_address("169.254.169.254"), allowed) == "a link-local address"


@given(st.integers(min_value=0, max_value=2**32 - 1))
def test_every_ipv4_address_is_refused_exactly_when_it_is_not_global(number: int) -> None:
    address = IPv4Address(number)
    assert (refusal(address) is None) == address.is_global
