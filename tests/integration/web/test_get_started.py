"""The overview's "Get started" card: the API base URL, a key's prefix (never its secret), the
tenant's own model ids, and curl and OpenAI SDK snippets that call the first of them."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import Api
from tests.integration.web.conftest import PASSWORD, htmx, sign_in
from tests.support.adapter_api import create_adapter, ensure_tiny_base, upload_valid

API_BASE = "http://testserver.local/v1"  # the test client's host, as the request reached us


def _card(page: str) -> str:
    return page.split('id="get-started"')[1].split("</section>")[0]


async def _new_key(client, name: str, scopes: list[str]) -> str:
    created = await client.post(
        "/console/keys", data={"name": name, "scopes": scopes}, headers=htmx(client)
    )
    assert created.status_code == 201, created.text
    return created.text.split("<code data-secret>")[1].split("</code>")[0]


async def test_the_card_shows_the_newest_inference_keys_prefix_and_never_a_secret(
    browser_client, make_tenant, make_user
) -> None:
    tenant = await make_tenant()
    await sign_in(browser_client, (await make_user(tenant)).email, PASSWORD)
    sdk = await _new_key(browser_client, "sdk", ["inference"])
    reader = await _new_key(browser_client, "reader", ["read"])  # newer, but cannot infer

    page = (await browser_client.get("/console/")).text
    card = _card(page)

    prefix, reader_prefix = sdk.split("_")[1], reader.split("_")[1]
    assert f"<code data-key-prefix>lpx_{prefix}_…</code>" in card
    assert reader_prefix not in card
    assert sdk not in page and reader not in page and tenant.api.key not in page
    assert f"<code data-api-base>{API_BASE}</code>" in card
    assert page.index('id="get-started"') < page.index("<h2>Quotas</h2>")  # near the top


async def test_without_a_live_inference_key_the_card_links_to_the_keys_page(
    browser_client, make_tenant, make_user
) -> None:
    tenant = await make_tenant(scopes=("admin",))
    await sign_in(browser_client, (await make_user(tenant)).email, PASSWORD)
    secret = await _new_key(browser_client, "soon-revoked", ["inference"])
    prefix = secret.split("_")[1]
    assert prefix in _card((await browser_client.get("/console/")).text)
    keys = (await tenant.api.get(f"/api/v1/tenants/{tenant.id}/api-keys")).json()["items"]
    key_id = next(k["id"] for k in keys if k["name"] == "soon-revoked")
    await browser_client.post(f"/console/keys/{key_id}/revoke", headers=htmx(browser_client))

    card = _card((await browser_client.get("/console/")).text)

    assert prefix not in card and "data-key-prefix" not in card
    assert 'No key with the <code>inference</code> scope yet: <a href="/console/keys">' in card


async def test_the_snippets_call_the_tenants_first_model_as_v1_models_names_it(
    browser_client, make_tenant, make_user, operator: Api, tmp_path: Path
) -> None:
    tenant = await make_tenant()
    base = await ensure_tiny_base(operator)
    for name, versions in (("alpha", 1), ("beta", 1), ("gamma", 0)):
        await create_adapter(tenant.api, tenant.id, name, base)
        for n in range(versions):
            await upload_valid(tenant.api, tenant.id, name, tmp_path / name / f"v{n}")
    await sign_in(browser_client, (await make_user(tenant)).email, PASSWORD)
    for alias in ("prod", "canary"):
        made = await browser_client.post(
            "/console/adapters/alpha/aliases",
            data={"alias": alias, "version": 1},
            headers=htmx(browser_client),
        )
        assert made.status_code == 200, made.text

    card = _card((await browser_client.get("/console/")).text)

    shown = [c.split("</code>")[0] for c in card.split("<code data-model-id>")[1:]]
    assert shown == ["alpha@prod", "alpha@canary", "beta"]  # prod first; gamma has no version
    served = (await tenant.api.get("/v1/models")).json()["data"]
    assert set(shown) <= {m["id"] for m in served}  # ids a client can send as they are
    python = card.split('data-snippet="python"><code>')[1].split("</code>")[0]
    assert f'OpenAI(base_url="{API_BASE}", api_key=os.environ["LORAPLEX_API_KEY"])' in python
    assert 'model="alpha@prod",' in python and "stream=True," in python
    assert 'print(chunk.choices[0].delta.content or "", end="", flush=True)' in python
    curl = card.split('data-snippet="curl"><code>')[1].split("</code>")[0]
    assert f"curl -N {API_BASE}/chat/completions" in curl
    assert '"Authorization: Bearer $LORAPLEX_API_KEY"' in curl
    assert '"model": "alpha@prod", "stream": true' in curl
    assert 'href="/console/playground"' in card and 'href="/console/fine-tunes"' in card


async def test_a_tenant_without_adapters_is_told_so_and_sent_to_the_adapters_page(
    browser_client, make_tenant, make_user
) -> None:
    tenant = await make_tenant()
    await sign_in(browser_client, (await make_user(tenant)).email, PASSWORD)

    card = _card((await browser_client.get("/console/")).text)

    assert 'No adapters yet: <a href="/console/adapters">upload one' in card
    assert "data-snippet" not in card and "data-model-id" not in card
    assert 'href="/console/playground"' in card and 'href="/console/fine-tunes"' in card


async def test_a_training_file_gets_a_one_click_fine_tune_with_the_starter_settings(
    browser_client, make_tenant, make_user, operator: Api
) -> None:
    import json
    import re

    tenant = await make_tenant()
    await sign_in(browser_client, (await make_user(tenant)).email, PASSWORD)
    await ensure_tiny_base(operator)
    assert "starter-tune" not in _card((await browser_client.get("/console/")).text)
    rows = [{"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}]
    uploaded = await browser_client.post(
        "/console/fine-tunes/files",
        files={"file": ("demo-chat.jsonl", json.dumps(rows[0]) + "\n", "application/jsonl")},
        headers=htmx(browser_client),
    )
    assert uploaded.status_code == 201, uploaded.text

    card = _card((await browser_client.get("/console/")).text)
    assert "on demo-chat.jsonl</button>" in card
    fields = dict(re.findall(r'<input type="hidden" name="([a-z_]+)" value="([^"]*)">', card))
    started = await browser_client.post(
        "/console/fine-tunes/", data=fields, headers=htmx(browser_client)
    )

    assert started.status_code == 201, started.text
    job_id = started.headers["hx-redirect"].rsplit("/", 1)[1]
    job = (await tenant.api.get(f"/v1/fine_tuning/jobs/{job_id}")).json()
    assert job["hyperparameters"]["n_epochs"] == 60
    assert job["hyperparameters"]["learning_rate_multiplier"] == 15
