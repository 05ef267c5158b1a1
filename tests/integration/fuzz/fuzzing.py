"""One fuzzing pass over every operation of the document: send, check, tally.

Two kinds of requests per operation: schemathesis' coverage cases (boundaries, missing and
mistyped values, unusual strings: a fixed list) and `EXAMPLES` Hypothesis-generated valid
and invalid requests from each of `SEEDS`. Each answer goes through schemathesis'
`not_a_server_error` and `response_schema_conformance` checks and our own
`no_internals_in_errors`.
"""

from __future__ import annotations

import contextlib
import re
import secrets
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import hypothesis
from hypothesis import HealthCheck, Phase
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error
from schemathesis.core.failures import Failure, FailureGroup
from schemathesis.generation import GenerationMode

# The coverage phase has no public per-operation entry point outside schemathesis' pytest
# plugin and CLI; this is the function both of them call (schemathesis 4.x).
from schemathesis.generation.hypothesis.builder import (
    HypothesisTestConfig,
    HypothesisTestMode,
    create_test,
)
from schemathesis.specs.openapi.checks import response_schema_conformance

EXAMPLES = 8  # generated requests per operation, per generation mode, per key, per seed
# Several fixed seeds, so one seed's luck is not the proof (the suite's first seed never
# generated an adapter for a tenant that does not exist, a 500 then); every run sends the
# same requests.
SEEDS = (18, 4242, 90210)
SEED = SEEDS[0]  # the coverage phase's (its cases are a fixed list)
# 503 "no engine can serve this" is the documented answer of inference on a stack without one.
ENGINELESS = {"POST /v1/chat/completions", "POST /v1/completions", "POST /v1/responses"}
BASE_MODEL = {
    "source": "fuzz/base",
    "architecture": "LlamaForCausalLM",
    "hidden_size": 64,
    "num_layers": 2,
    "vocab_size": 256,
    "max_context": 512,
    "modules": {"q_proj": [64, 64], "v_proj": [64, 64]},
}
# What no error body may show a client: tracebacks, exception class names, internal addresses.
INTERNALS = re.compile(
    r"Traceback|File \"[^\"]+\", line \d+"
    r"|\b[A-Z][A-Za-z]*(?:Error|Exception)\b"
    r"|\bhttps?://|\b\d{1,3}(?:\.\d{1,3}){3}\b|\blocalhost\b"
)


@dataclass
class Known:
    """Real names for the generator to use besides random ones, so requests get past 404s."""

    tenant_id: str
    tenant_key: str
    model: str


@dataclass
class Tally:
    """What one fuzzing pass sent and what it found."""

    requests: int = 0
    operations: int = 0
    statuses: Counter[int] = field(default_factory=Counter)
    failures: dict[tuple[str, str], str] = field(default_factory=dict)


def known_objects(schema: Any, operator_key: str) -> Known:
    """A base model, and a tenant with a key that has every tenant scope."""
    auth = {"Authorization": f"Bearer {operator_key}"}
    model = (
        schema["/api/v1/base-models"]["POST"]
        .Case(body={**BASE_MODEL, "name": f"fuzz-base-{secrets.token_hex(3)}"})
        .call(headers=auth)
    )
    assert model.status_code == 201, model.text
    slug = f"fuzz-{secrets.token_hex(4)}"
    tenant = (
        schema["/api/v1/tenants"]["POST"]
        .Case(body={"slug": slug, "name": slug, "plan": "pro"})
        .call(headers=auth)
    )
    assert tenant.status_code == 201, tenant.text
    key = (
        schema["/api/v1/tenants/{tenant_id}/api-keys"]["POST"]
        .Case(
            path_parameters={"tenant_id": tenant.json()["id"]},
            body={"name": "fuzz", "scopes": ["admin", "inference", "fine-tune"]},
        )
        .call(headers=auth)
    )
    assert key.status_code == 201, key.text
    return Known(tenant.json()["id"], str(key.json()["key"]), model.json()["name"])


def no_internals_in_errors(ctx: Any, response: Any, case: Any) -> bool | None:
    """An error body or SSE error event names the problem, never a traceback, a class name
    or an address."""
    text = response.text or ""
    if response.status_code < 400:
        if "text/event-stream" not in (response.headers.get("content-type") or [""])[0]:
            return None  # an answer, not an error (an operator may read engine URLs)
        # A stream that failed says so in an event: check those, not the model's output.
        text = "\n".join(line for line in text.splitlines() if '"error"' in line)
    for sent in _strings_sent(case):  # the client's own words echoed back are not internals
        text = text.replace(sent, "")
    leaked = INTERNALS.search(text)
    assert leaked is None, f"the error shows {leaked.group(0)!r}: {text[:300]}"
    return None


def _strings_sent(case: Any) -> list[str]:
    """Every string the request carried (body, path, query, headers), longest first."""
    found: list[str] = []

    def walk(value: Any) -> None:
        if isinstance(value, str):
            found.append(value)
        elif isinstance(value, dict):
            for key, item in value.items():
                walk(key)
                walk(item)
        elif isinstance(value, (list, tuple)):
            for item in value:
                walk(item)

    for part in ("body", "path_parameters", "query", "headers", "cookies"):
        walk(getattr(case, part, None))
    return sorted((s for s in found if s), key=len, reverse=True)


def fuzz(schema: Any, key: str, known: Known) -> Tally:
    """Every operation: its coverage cases, then generated valid and invalid requests."""
    tally = Tally()
    for result in schema.get_all_operations():
        operation = result.ok()
        tally.operations += 1
        _coverage(schema, operation, key, known, tally)
        for seed in SEEDS:
            for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
                _generated(operation, mode, key, known, tally, seed)
    return tally


def check(case: Any, key: str, known: Known, tally: Tally) -> None:
    """Send one request with `key`; record each failed check."""
    body = case.body
    if tally.requests % 2 and isinstance(body, dict) and isinstance(body.get("model"), str):
        body["model"] = known.model  # half the inference bodies name a model that exists
    headers = {"Authorization": f"Bearer {key}"}
    response = case.call(headers=headers, timeout=30)
    validate(case, response, headers, tally)


def validate(
    case: Any,
    response: Any,
    headers: dict[str, str],
    tally: Tally,
    *,
    extra: tuple[Callable[..., Any], ...] = (),
    recorder: Any = None,
) -> None:
    """Count one answer and record each check it fails: no server error (but a 503 where no
    engine is the documented reason), the documented schema, no internals; then `extra`."""
    tally.requests += 1
    tally.statuses[response.status_code] += 1
    label = case.operation.label
    checks: list[Callable[..., Any]] = [response_schema_conformance, no_internals_in_errors]
    if not (response.status_code == 503 and label in ENGINELESS):
        checks.append(not_a_server_error)
    checks.extend(extra)
    try:
        case.validate_response(response, checks=checks, headers=headers, recorder=recorder)
    except FailureGroup as group:
        for failure in group.exceptions:
            _record(tally, label, failure, case, response)
    except Failure as failure:
        _record(tally, label, failure, case, response)


def _record(tally: Tally, label: str, failure: Failure, case: Any, response: Any) -> None:
    name = type(failure).__name__
    tally.failures.setdefault(
        (label, name),
        f"{failure.title}: {failure.message[:300]}\n  sent: {case.as_curl_command()[:400]}"
        f"\n  got {response.status_code}: {response.text[:300]}",
    )


def _coverage(schema: Any, operation: Any, key: str, known: Known, tally: Tally) -> None:
    def send(case: Any) -> None:
        check(case, key, known, tally)

    cases = create_test(
        operation=operation,
        test_func=send,
        config=HypothesisTestConfig(
            project=schema.config,
            modes=[HypothesisTestMode.COVERAGE],
            settings=_settings(max_examples=1, phases=[Phase.explicit]),
            seed=SEED,
        ),
    )
    cases()


def _generated(
    operation: Any, mode: GenerationMode, key: str, known: Known, tally: Tally, seed: int
) -> None:
    # Not derandomized: that would draw from a hash of this function, the same for every
    # seed; the seed alone makes the run repeatable.
    @hypothesis.given(case=_strategy(operation, mode, known))
    @_settings(max_examples=EXAMPLES, phases=[Phase.explicit, Phase.generate], derandomize=False)
    @hypothesis.seed(seed)
    def send(case: Any) -> None:
        check(case, key, known, tally)

    with contextlib.suppress(hypothesis.errors.Unsatisfiable):
        send()  # Unsatisfiable: nothing invalid can be sent (no parameters, no body)


def _strategy(operation: Any, mode: GenerationMode, known: Known) -> Any:
    """Random requests, and as many again in the known tenant (when the path names one)."""
    random = operation.as_strategy(generation_mode=mode)
    if "{tenant_id}" not in operation.path:
        return random
    in_tenant = operation.as_strategy(
        generation_mode=mode, path_parameters={"tenant_id": known.tenant_id}
    )
    return st.one_of(random, in_tenant)


def _settings(*, derandomize: bool = True, **kw: Any) -> hypothesis.settings:
    return hypothesis.settings(
        derandomize=derandomize,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        **kw,
    )
