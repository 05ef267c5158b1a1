"""Schemathesis over the whole OpenAPI document, in-process, as an operator and as a tenant admin.

Every operation in `/schema/openapi.json` gets its coverage cases and a bounded number of
generated valid and invalid requests from each of three fixed seeds (`fuzzing.py`), twice:
with a tenant admin key and with an operator key. No request may answer a server error (a 503 only where
no engine is the documented reason), every answer must match the schema documented for its
status, and no error body may show internals.
"""

from __future__ import annotations

import time

import pytest
import schemathesis
from litestar import Litestar

from tests.integration.fuzz.fuzzing import fuzz, known_objects

# (operation, failure) pairs that still fail, each with the reason; empty is the goal.
KNOWN_FAILURES: dict[tuple[str, str], str] = {}


@pytest.mark.slow
def test_no_request_answers_a_server_error_an_undocumented_body_or_internals(
    fuzz_app: Litestar, fuzz_operator_key: str
) -> None:
    """Zero server errors, schema-conformant answers, clean error bodies, for both keys."""
    schema = schemathesis.openapi.from_asgi("/schema/openapi.json", fuzz_app)
    known = known_objects(schema, fuzz_operator_key)
    # The tenant admin goes first: the operator's pass may suspend or delete that tenant.
    keys = {"tenant admin": known.tenant_key, "operator": fuzz_operator_key}
    found: dict[tuple[str, str], str] = {}
    for who, key in keys.items():
        started = time.monotonic()
        tally = fuzz(schema, key, known)
        print(
            f"\nfuzz as {who}: {tally.operations} operations, {tally.requests} requests in "
            f"{time.monotonic() - started:.0f} s; statuses {dict(sorted(tally.statuses.items()))}"
        )
        for where, what in tally.failures.items():
            found.setdefault(where, f"[{who}] {what}")
    unexpected = {k: v for k, v in found.items() if k not in KNOWN_FAILURES}
    assert not unexpected, "\n\n".join(
        f"{op} {kind}: {what}" for (op, kind), what in unexpected.items()
    )
