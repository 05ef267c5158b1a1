"""HTTP GETs that connect only to addresses the policy allows, pinned to the one checked.

Checking a host name and then letting the client resolve it again would let a DNS answer
change in between (rebinding): each hop resolves once, judges every address it got, and
connects to the first by IP, while the `Host` header and TLS (SNI and the certificate
check) still use the name. Redirects are followed by hand, each hop checked the same way.
"""

from __future__ import annotations

import socket
import ssl
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from ipaddress import ip_address
from pathlib import Path

import httpx

from loraplex.adapters.fetch.addresses import IPNetwork, refusal
from loraplex.adapters.fetch.errors import FetchError, FetchProblem

MAX_REDIRECTS = 5
CONNECT_TIMEOUT_S = 15.0
DEFAULT_PORTS = {"http": 80, "https": 443}


@dataclass(frozen=True)
class FetchLimits:
    """What one import may do: reach these networks, fetch this many bytes, until then."""

    allowed: tuple[IPNetwork, ...]
    max_bytes: int
    deadline: float  # time.monotonic() by which the whole fetch ends
    ca_file: str = ""
    progress: Callable[[int], None] | None = None  # told the bytes fetched so far, often

    def remaining_s(self) -> float:
        """Seconds left, or a TIMED_OUT error when none are."""
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise FetchError(FetchProblem.TIMED_OUT, "the import took longer than its time limit")
        return left


def http_client(limits: FetchLimits) -> httpx.Client:
    """A client for one import: no redirects of its own, no proxies from the environment
    (a proxy would connect for us, past the address check)."""
    verify: ssl.SSLContext | bool = True
    if limits.ca_file:
        verify = ssl.create_default_context(cafile=limits.ca_file)
    return httpx.Client(follow_redirects=False, trust_env=False, verify=verify)


def checked_addresses(host: str, port: int, limits: FetchLimits) -> list[str]:
    """Resolve `host` once; its addresses, when every one of them may be reached."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise FetchError(
            FetchProblem.SOURCE_FAILED, "the source's host name does not resolve"
        ) from exc
    addresses = list(dict.fromkeys(ip_address(str(i[4][0]).split("%", 1)[0]) for i in infos))
    for address in addresses:
        reason = refusal(address, limits.allowed)
        if reason:
            raise FetchError(
                FetchProblem.ADDRESS_REFUSED,
                f"the source resolves to {reason}; imports reach public addresses only",
            )
    return [str(a) for a in addresses]


@contextmanager
def open_get(
    client: httpx.Client,
    url: str,
    limits: FetchLimits,
    headers: Mapping[str, str] | None = None,
    max_redirects: int = MAX_REDIRECTS,
) -> Iterator[httpx.Response]:
    """GET `url` (following redirects, each hop checked); yields a 2xx streaming response."""
    target = httpx.URL(url)
    for _ in range(max_redirects + 1):
        response = _send_pinned(client, target, limits, headers or {})
        if not response.is_redirect:
            break
        response.close()
        target = target.join(response.headers["location"])
        if target.scheme not in DEFAULT_PORTS:
            raise FetchError(FetchProblem.SOURCE_FAILED, "the source redirected off HTTP(S)")
        headers = {}  # credentials are for the first host only
    else:
        if max_redirects == 0:  # S3: a bucket in another region than the one given
            raise FetchError(
                FetchProblem.SOURCE_FAILED,
                "the source redirected elsewhere; check the bucket's region and endpoint",
            )
        raise FetchError(FetchProblem.SOURCE_FAILED, "the source redirected too many times")
    try:
        _raise_for_status(response)
        yield response
    finally:
        response.close()


def _send_pinned(
    client: httpx.Client, target: httpx.URL, limits: FetchLimits, headers: Mapping[str, str]
) -> httpx.Response:
    """One GET of `target`, connecting to its checked addresses in turn until one answers."""
    if target.scheme not in DEFAULT_PORTS or not target.host:
        raise FetchError(FetchProblem.BAD_SOURCE, "the source must be an http(s) URL")
    port = target.port or DEFAULT_PORTS[target.scheme]
    host = f"[{target.host}]" if ":" in target.host else target.host
    host_header = host if target.port is None else f"{host}:{target.port}"
    addresses = checked_addresses(target.host, port, limits)
    for number, address in enumerate(addresses, 1):
        left = limits.remaining_s()
        timeout = httpx.Timeout(min(60.0, left), connect=min(CONNECT_TIMEOUT_S, left))
        request = client.build_request(
            "GET",
            target.copy_with(host=address),
            # identity: a compressed answer would be inflated before the size cap sees it
            headers={"Host": host_header, "Accept-Encoding": "identity", **headers},
            extensions={"sni_hostname": target.host, "timeout": timeout.as_dict()},
        )
        try:
            return client.send(request, stream=True)
        except httpx.ConnectError as exc:
            if _is_tls_failure(exc):
                raise FetchError(
                    FetchProblem.SOURCE_FAILED, "the source's TLS certificate is not trusted"
                ) from exc
            if number == len(addresses):
                raise FetchError(
                    FetchProblem.SOURCE_FAILED, "could not connect to the source"
                ) from exc
        except httpx.TimeoutException as exc:
            raise FetchError(FetchProblem.TIMED_OUT, "the source did not answer in time") from exc
        except httpx.HTTPError as exc:
            raise FetchError(
                FetchProblem.SOURCE_FAILED, "the connection to the source failed"
            ) from exc
    raise AssertionError("getaddrinfo returned no address")  # it raises instead


def _is_tls_failure(exc: httpx.ConnectError) -> bool:
    cause = exc.__cause__ or exc.__context__
    return isinstance(cause, ssl.SSLError) or "CERTIFICATE_VERIFY_FAILED" in str(exc)


def _raise_for_status(response: httpx.Response) -> None:
    status = response.status_code
    if 200 <= status < 300:
        return
    response.close()
    if status in (401, 403):
        raise FetchError(
            FetchProblem.SOURCE_DENIED,
            f"the source refused access (HTTP {status}); check the credentials",
        )
    if status == 404:
        raise FetchError(FetchProblem.SOURCE_NOT_FOUND, "the source has no such file (HTTP 404)")
    raise FetchError(FetchProblem.SOURCE_FAILED, f"the source answered HTTP {status}")


def download(
    client: httpx.Client,
    url: str,
    dest: Path,
    limits: FetchLimits,
    already: int = 0,
    headers: Mapping[str, str] | None = None,
    max_redirects: int = MAX_REDIRECTS,
) -> int:
    """Stream `url` into `dest`; returns the bytes fetched so far in this import (`already`
    plus this file's), refusing as soon as the total passes `limits.max_bytes`."""
    total = already
    with open_get(client, url, limits, headers, max_redirects) as response:
        declared = response.headers.get("content-length", "")
        if declared.isdigit() and already + int(declared) > limits.max_bytes:
            raise _too_large(limits)
        with dest.open("wb") as out:
            try:
                # Raw bytes as they arrive: never inflated (whatever the source claims), and
                # a source that drips them meets the deadline.
                for chunk in response.iter_raw():
                    total += len(chunk)
                    if total > limits.max_bytes:
                        raise _too_large(limits)
                    limits.remaining_s()
                    out.write(chunk)
                    if limits.progress is not None:
                        limits.progress(total)
            except httpx.TimeoutException as exc:
                raise FetchError(FetchProblem.TIMED_OUT, "the source stopped sending") from exc
            except httpx.HTTPError as exc:
                raise FetchError(FetchProblem.SOURCE_FAILED, "the download was cut off") from exc
    return total


def read_small(
    client: httpx.Client,
    url: str,
    limits: FetchLimits,
    headers: Mapping[str, str] | None = None,
    max_bytes: int = 1024 * 1024,
) -> bytes:
    """A small answer (a file listing) read into memory, at most `max_bytes`."""
    body = bytearray()
    with open_get(client, url, limits, headers) as response:
        for chunk in response.iter_bytes(64 * 1024):
            body.extend(chunk)
            if len(body) > max_bytes:
                raise FetchError(FetchProblem.SOURCE_FAILED, "the source's listing is too large")
    return bytes(body)


def _too_large(limits: FetchLimits) -> FetchError:
    return FetchError(
        FetchProblem.TOO_LARGE, f"the adapter is larger than the {limits.max_bytes} byte limit"
    )
