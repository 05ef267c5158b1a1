"""The fetch layer against the HTTPS server on loopback. Without the operator's allow-list
it never connects there; with it, the same fetch works (so the refusal is the rule's)."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import pytest
import trustme

from loraplex.adapters.fetch import (
    FetchError,
    FetchLimits,
    FetchProblem,
    UrlSource,
    fetch_source,
    parse_networks,
)
from tests.support.hub_server import HubServer
from tests.support.lora_files import write_adapter


def limits(allow: str, ca: Path | None) -> FetchLimits:
    return FetchLimits(
        allowed=parse_networks(allow),
        max_bytes=2**20,
        deadline=time.monotonic() + 30,
        ca_file=str(ca or ""),
    )


@pytest.fixture
def served_folder(https_server: HubServer, tmp_path: Path) -> str:
    """A folder URL (the two files) on the HTTPS server, by host name `localhost`."""
    name = tmp_path.name
    write_adapter(https_server.root / name)
    return f"{https_server.url}/files/{name}/"


def test_loopback_is_refused_without_the_allow_list_and_never_contacted(
    https_server: HubServer, served_folder: str, test_ca: tuple[trustme.CA, Path], tmp_path: Path
) -> None:
    seen = len(https_server.requests)
    with pytest.raises(FetchError) as refused:
        fetch_source(UrlSource(served_folder), tmp_path, limits("", test_ca[1]), "")
    assert refused.value.problem is FetchProblem.ADDRESS_REFUSED
    assert "loopback" in refused.value.message
    assert len(https_server.requests) == seen


def test_the_allow_list_lets_the_same_fetch_through(
    served_folder: str, test_ca: tuple[trustme.CA, Path], tmp_path: Path
) -> None:
    files = fetch_source(
        UrlSource(served_folder), tmp_path, limits("127.0.0.0/8,::1/128", test_ca[1]), ""
    )
    assert sorted(f.name for f in files) == ["adapter_config.json", "adapter_model.safetensors"]


def test_a_certificate_from_an_unknown_ca_is_not_trusted(
    served_folder: str, tmp_path: Path
) -> None:
    with pytest.raises(FetchError) as refused:
        fetch_source(UrlSource(served_folder), tmp_path, limits("127.0.0.0/8,::1/128", None), "")
    assert refused.value.message == "the source's TLS certificate is not trusted"


def test_progress_is_told_the_bytes_as_they_arrive(
    https_server: HubServer, served_folder: str, test_ca: tuple[trustme.CA, Path], tmp_path: Path
) -> None:
    seen: list[int] = []
    allowed = replace(limits("127.0.0.0/8,::1/128", test_ca[1]), progress=seen.append)

    files = fetch_source(UrlSource(served_folder), tmp_path, allowed, "")

    assert seen == sorted(seen) and seen[-1] == sum(f.stat().st_size for f in files)
