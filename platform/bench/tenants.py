"""What benches and tests make over the API as an operator: a tenant with an inference key,
an engine registered for a base model."""

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


def register_engine(
    url: str, operator_key: str, base_model: dict[str, object], engine: dict[str, object]
) -> str:
    """Register `base_model` (kept if there already) and `engine` for it, replacing an
    earlier run's registration of the same engine URL; a new enterprise tenant's key."""
    ops = {"Authorization": f"Bearer {operator_key}"}
    made = httpx.post(f"{url}/api/v1/base-models", json=base_model, headers=ops)
    if made.status_code != 409:  # 409: registered by an earlier run on this database
        made.raise_for_status()
    known = httpx.get(f"{url}/api/v1/engines", params={"page_size": 100}, headers=ops)
    for row in known.json()["items"]:
        if row["url"] == engine["url"] and row["source"] == "database":
            httpx.delete(f"{url}/api/v1/engines/{row['id']}", headers=ops).raise_for_status()
    httpx.post(f"{url}/api/v1/engines", json=engine, headers=ops).raise_for_status()
    return tenant_key(url, operator_key, plan="enterprise")
