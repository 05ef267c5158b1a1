"""A tenant with an inference key, made over the API as an operator: benches and tests use it."""

from __future__ import annotations

import secrets

import httpx


def tenant_key(url: str, operator_key: str, *, plan: str = "pro", **limits: int) -> str:
    """Create a tenant on `plan` with quota `limits` overridden; return its inference API key."""
    return new_tenant(url, operator_key, plan=plan, **limits)[1]


def new_tenant(url: str, operator_key: str, *, plan: str = "pro", **limits: int) -> tuple[str, str]:
    """Create a tenant on `plan` with quota `limits` overridden; return its id and an
    inference API key."""
    ops = {"Authorization": f"Bearer {operator_key}"}
    slug = f"t-{secrets.token_hex(4)}"
    created = httpx.post(
        f"{url}/api/v1/tenants", json={"slug": slug, "name": slug, "plan": plan}, headers=ops
    )
    created.raise_for_status()
    tenant_id = created.json()["id"]
    if limits:
        httpx.put(
            f"{url}/api/v1/tenants/{tenant_id}/quota", json={"overrides": limits}, headers=ops
        ).raise_for_status()
    key = httpx.post(
        f"{url}/api/v1/tenants/{tenant_id}/api-keys",
        json={"name": "bench", "scopes": ["inference"]},
        headers=ops,
    )
    key.raise_for_status()
    return str(tenant_id), str(key.json()["key"])
