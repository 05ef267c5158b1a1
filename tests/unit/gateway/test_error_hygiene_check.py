"""The check every error body in the suite goes through catches what it must, and lets
ordinary messages through (tests/support/hygiene.py)."""

from __future__ import annotations

import pytest

from tests.support.hygiene import leaks


@pytest.mark.parametrize(
    "body",
    [
        '{"error": {"message": "engine at 10.0.3.7 did not answer"}}',
        "upstream http://engine-0:8100/v1/chat/completions failed",
        "could not reach sglang-0.engines.svc",
        "connect failed on port 8100",
        "httpx.ReadTimeout while streaming",
        "ConnectionRefusedError: [Errno 111]",
        'Traceback (most recent call last):\n  File "/srv/app.py", line 3',
    ],
)
def test_an_internal_detail_in_an_error_is_caught(body: str) -> None:
    assert leaks(body)


@pytest.mark.parametrize(
    "body",
    [
        '{"error": {"message": "max_tokens must be at most 4096", "param": "max_tokens"}}',
        "the engine stopped mid-stream; quote chatcmpl-01a2b3 when asking the operator",
        "Rate limit reached: 60 requests per minute; retry after 12 s",
        "from must be a date written YYYY-MM-DD, not '2026-13-01'",
        "model `support@v2` does not exist",
        "Started 03:44:30 UTC",
    ],
)
def test_an_ordinary_error_message_passes(body: str) -> None:
    assert not leaks(body)


def test_a_problem_documents_status_is_no_port() -> None:
    body = '{"type":"urn:loraplex:problem:conflict","status":409,"detail":"already registered"}'
    assert not leaks(body) and leaks("engine-0:8100 refused")
