"""Gateway tests talk to a real API process over httpx (and the openai SDK, which uses it):
every error that process sends a Loraplex client is checked for internal detail, as the
in-process client's are (tests/support/hygiene.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.support.hygiene import check_error_body, check_error_body_sync, loraplex_key_in


@pytest.fixture(autouse=True)
def errors_carry_no_internals(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Check each error answer to a request that carried a Loraplex key."""
    send, send_async = httpx.Client.send, httpx.AsyncClient.send

    def checked(self: httpx.Client, request: httpx.Request, **kw: Any) -> httpx.Response:
        response = send(self, request, **kw)
        if loraplex_key_in(request):
            check_error_body_sync(response)
        return response

    async def checked_async(
        self: httpx.AsyncClient, request: httpx.Request, **kw: Any
    ) -> httpx.Response:
        response = await send_async(self, request, **kw)
        if loraplex_key_in(request):
            await check_error_body(response)
        return response

    monkeypatch.setattr(httpx.Client, "send", checked)
    monkeypatch.setattr(httpx.AsyncClient, "send", checked_async)
    yield
