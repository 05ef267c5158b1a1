"""Schemathesis' state machine over the document's links, in-process: chains with real ids.

The stateless fuzzer (`test_openapi_fuzz.py`) names random ids, so nearly every call past a
create answers 404. Here schemathesis follows the links the document declares
(`loraplex.api.openapi_links`): it creates a tenant and then fuzzes its quota, keys, users
and adapters; creates an adapter and then its versions and aliases; uploads a training file
and then reads, deletes or trains on it. Every answer gets the stateless fuzzer's checks (no
server error but the engineless 503, the documented schema, no internals in errors) and
schemathesis' two stateful ones: what was just created is there, what was deleted is gone.

Control-plane calls go as the operator (only an operator creates tenants); `/v1` calls as a
tenant admin of a known tenant, since files and jobs belong to the key's tenant.
"""

from __future__ import annotations

import json
import time
import zlib
from collections import Counter
from typing import Any

import hypothesis
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase
from litestar import Litestar
from schemathesis.engine.errors import is_inconsistent_replay
from schemathesis.generation.stateful import run_state_machine_as_test
from schemathesis.specs.openapi.checks import ensure_resource_availability, use_after_free

from tests.integration.fuzz.fuzzing import Known, Tally, known_objects, validate

# Fixed seeds: every run draws the same scenarios (the ids in them differ, the choices do not).
SEEDS = (18, 4242)
SCENARIOS = 80  # per seed
STEPS = 15  # calls per scenario, at most
MAX_RESTARTS = 8  # per seed, after a replay the API answered otherwise (see `_run`)
STATEFUL_CHECKS = (ensure_resource_availability, use_after_free)
TRAINING_FILE = "\n".join(
    json.dumps({"messages": [{"role": "user", "content": q}, {"role": "assistant", "content": a}]})
    for q, a in [("hi", "hello"), ("2+2?", "4"), ("bye", "goodbye")]
).encode()
SETTINGS = hypothesis.settings(
    max_examples=SCENARIOS,
    stateful_step_count=STEPS,
    phases=[Phase.generate],  # a failure is recorded and the run goes on: nothing to shrink
    derandomize=False,  # the seed alone makes the run repeatable (see fuzzing.py)
    database=None,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)
# What schemathesis' use-after-free check flags but the API means: DeleteTenant keeps the row.
BY_DESIGN = {
    ("GET /api/v1/tenants/{tenant_id}/audit", "UseAfterFree"): "a deleted tenant's audit trail",
    ("GET /api/v1/tenants/{tenant_id}/usage", "UseAfterFree"): "a deleted tenant's usage (billing)",
}
# Calls the links carry to a success in every run (more than a dozen times each); if one is
# missing, ids have stopped flowing from a create to what follows it.
CHAINS = {
    "GET /api/v1/tenants/{tenant_id}/api-keys",
    "GET /api/v1/tenants/{tenant_id}/users",
    "GET /v1/files/{file_id}",
    "DELETE /v1/files/{file_id}",
}
MIN_LINKED_SUCCESSES = 80  # of the ~170 a run makes


@pytest.mark.slow
def test_chains_of_calls_with_real_ids_answer_no_server_error_or_undocumented_body(
    fuzz_app: Litestar, fuzz_operator_key: str
) -> None:
    """Zero failed checks over every scenario of every seed, and the main chains reached."""
    schema = schemathesis.openapi.from_asgi("/schema/openapi.json", fuzz_app)
    # The document's own links only: schemathesis' inferred ones (e.g. ListTenants -> DeleteTenant)
    # would test its guesses, and could delete the tenant the /v1 calls run in.
    schema.config.phases.stateful.inference.algorithms = []
    known = known_objects(schema, fuzz_operator_key)
    tally = Tally()
    linked: Counter[str] = Counter()  # successful calls whose ids came through a link
    started = time.monotonic()
    machine = _machine(schema, known, fuzz_operator_key, tally, linked)
    for seed in SEEDS:
        _run(machine, seed)
    print(
        f"\nstateful fuzz: {tally.requests} requests, {sum(linked.values())} linked successes in "
        f"{time.monotonic() - started:.0f} s; statuses {dict(sorted(tally.statuses.items()))}"
        f"\nlinked successes: {dict(sorted(linked.items()))}"
    )
    unexpected = {k: v for k, v in tally.failures.items() if k not in BY_DESIGN}
    assert not unexpected, "\n\n".join(
        f"{op} {kind}: {what}" for (op, kind), what in unexpected.items()
    )
    assert set(linked) >= CHAINS, f"never reached through a link: {CHAINS - set(linked)}"
    assert sum(linked.values()) >= MIN_LINKED_SUCCESSES


def _run(machine: type, seed: int) -> None:
    """`SCENARIOS` scenarios from `seed`, carrying on after a replay the API answers otherwise.

    Hypothesis replays the start of earlier scenarios to find new ones; the API's state has
    moved on since (the slug taken, the file deleted), so a replay can fill a bundle the first
    run left empty, which Hypothesis reports as `Flaky`. Schemathesis' own runner carries on
    after one too. The failures found so far are kept: `validate` records, it does not raise.
    """
    done = 0
    for attempt in range(MAX_RESTARTS):
        scenarios = type(f"Scenarios{seed}_{attempt}", (machine,), {"rule_order_seed": seed})
        settings = hypothesis.settings(SETTINGS, max_examples=SCENARIOS - done)
        try:
            run_state_machine_as_test(hypothesis.seed(seed + attempt)(scenarios), settings=settings)
            return
        except (hypothesis.errors.Flaky, AssertionError) as exc:
            if not (isinstance(exc, hypothesis.errors.Flaky) or is_inconsistent_replay(exc)):
                raise
        done += scenarios.finished
        if done >= SCENARIOS:
            return


def _machine(
    schema: Any, known: Known, operator_key: str, tally: Tally, linked: Counter[str]
) -> type:
    """The schema's state machine, calling with the right key and recording, not raising."""

    class Chains(schema.as_state_machine()):  # type: ignore[misc]
        finished = 0  # scenarios run to the end, per class

        def teardown(self) -> None:
            type(self).finished += 1
            super().teardown()

        def step(self, given: Any) -> Any:
            output = super().step(given)
            if given.transition is not None and given.is_applied:
                linked[given.case.operation.label] += output.response.status_code < 300
            return output

        def before_call(self, case: Any) -> None:
            _steer(case, known)

        def get_call_kwargs(self, case: Any) -> dict[str, Any]:
            key = known.tenant_key if case.path.startswith("/v1/") else operator_key
            return {"headers": {"Authorization": f"Bearer {key}"}, "timeout": 30}

        def validate_response(
            self, response: Any, case: Any, additional_checks: Any = None, **kwargs: Any
        ) -> None:
            validate(
                case,
                response,
                kwargs["headers"],
                tally,
                extra=STATEFUL_CHECKS,
                recorder=self.recorder,
            )

    return Chains


def _steer(case: Any, known: Known) -> None:
    """Half the bodies name the base model that exists and, for an upload, a training file
    that parses, so chains get past the first create and fuzz what follows it. Which half is
    decided by the body itself, so a replayed scenario sends what it sent the first time."""
    body = case.body
    if not (isinstance(body, dict) and zlib.crc32(repr(sorted(body.items())).encode()) % 2):
        return
    for name in ("model", "base_model"):
        if isinstance(body.get(name), str):
            body[name] = known.model
    if case.operation.label == "POST /v1/files":
        body.update(file=TRAINING_FILE, purpose="fine-tune")
