"""Operators register and retire engines in the admin UI, as `/api/v1/engines` does."""

from __future__ import annotations

import secrets
import uuid

from loraplex.api.deps import services_of
from loraplex.control.quotas import Quotas
from loraplex.gateway.admission.places import PlaceBook
from loraplex.gateway.gate import EngineGate
from loraplex.gateway.resolve import Target
from tests.conftest import Api
from tests.integration.web.conftest import PASSWORD, htmx, sign_in
from tests.support.adapter_api import ensure_tiny_base

NOWHERE = "http://127.0.0.1:9"  # nothing listens: the engine is registered, never in rotation


async def test_an_operator_registers_an_engine_sees_it_and_removes_it(
    browser_client, operator: Api, operator_user
) -> None:
    base = await ensure_tiny_base(operator)
    await sign_in(browser_client, operator_user.email, operator_user.password)
    name = f"ui-{secrets.token_hex(3)}"
    form = {"name": name, "url": NOWHERE, "kind": "vllm", "base_model": base, "gpu_slots": "2"}

    registered = await browser_client.post(
        "/admin/engines/", data=form, headers=htmx(browser_client)
    )

    assert registered.status_code == 201 and f"Engine {name} registered" in registered.text
    engines = (await operator.get("/api/v1/engines", params={"page_size": 100})).json()["items"]
    engine = next(e for e in engines if e["name"] == name)
    assert (engine["url"], engine["gpu_slots"], engine["host_slots"]) == (NOWHERE, 2, 32)
    page = (await browser_client.get("/admin/engines/")).text
    assert f'data-engine="{name}"' in page

    removed = await browser_client.post(
        f"/admin/engines/{engine['id']}/remove", headers=htmx(browser_client)
    )
    assert removed.status_code == 200 and f'data-engine="{name}"' not in removed.text
    assert (await operator.get(f"/api/v1/engines/{engine['id']}")).status_code == 404


async def test_a_bad_engine_form_is_refused_with_the_field_named(
    browser_client, operator: Api, operator_user
) -> None:
    base = await ensure_tiny_base(operator)
    await sign_in(browser_client, operator_user.email, operator_user.password)
    good = {
        "name": f"ui-{secrets.token_hex(3)}",
        "url": NOWHERE,
        "kind": "vllm",
        "base_model": base,
    }
    post = lambda **changes: browser_client.post(  # noqa: E731
        "/admin/engines/", data={**good, **changes}, headers=htmx(browser_client)
    )

    slots = await post(gpu_slots="8", host_slots="4")
    kind = await post(kind="tgi")
    url = await post(url="not a url")

    assert slots.status_code == 400 and "host_slots" in slots.text
    assert kind.status_code == 400 and "kind" in kind.text
    assert url.status_code == 400 and "url" in url.text
    assert (await post()).status_code == 201
    taken = await post()
    assert taken.status_code == 409 and "already registered" in taken.text
    engines = (await operator.get("/api/v1/engines", params={"page_size": 100})).json()["items"]
    assert [e["name"] for e in engines].count(good["name"]) == 1
    await operator.delete(
        f"/api/v1/engines/{next(e['id'] for e in engines if e['name'] == good['name'])}"
    )


async def test_tenant_admins_cannot_see_or_register_engines(
    browser_client, make_tenant, make_user
) -> None:
    user = await make_user(await make_tenant())
    await sign_in(browser_client, user.email, PASSWORD)
    assert (await browser_client.get("/admin/engines/")).status_code == 403
    refused = await browser_client.post(
        "/admin/engines/", data={"name": "x", "url": NOWHERE}, headers=htmx(browser_client)
    )
    assert refused.status_code == 403


async def test_the_engines_page_and_api_show_the_places_admission_gives_an_engine(
    app, browser_client, operator: Api, operator_user
) -> None:
    base = await ensure_tiny_base(operator)
    await sign_in(browser_client, operator_user.email, operator_user.password)
    name = f"places-{secrets.token_hex(3)}"
    body = {"name": name, "url": NOWHERE, "kind": "vllm", "base_model": base, "gpu_slots": 12}
    engine_id = (await operator.post("/api/v1/engines", json=body)).json()["id"]
    handle = services_of(app).registry.get(engine_id)
    assert handle is not None
    handle.healthy = True  # in rotation, as if its probe had answered
    registry = services_of(app).registry
    # A gate of its own, with places (the suite's runs with none), and no quotas: its view
    # is what the page and the API read.
    gate = EngineGate(None, None, services_of(app).gateway.router, PlaceBook(parallelism=8))
    shown, registry.admission_view = registry.admission_view, gate.engine_view
    target = Target(model=base, base_model=base, max_context=4096, base_source="/nowhere")
    try:
        admitted = await gate.admit(
            uuid.uuid4(), Quotas(priority=1), "r1", stream=False, target=target,
            prompt_tokens=1, max_tokens=1,
        )  # fmt: skip
        async with admitted:
            live = (await operator.get(f"/api/v1/engines/{engine_id}")).json()["live"]
            table = (await browser_client.get("/admin/engines/live")).text
    finally:
        handle.healthy, registry.admission_view = False, shown
        await operator.delete(f"/api/v1/engines/{engine_id}")

    places = live["admission"]
    assert (places["places"], places["source"]) == (12, "slots")  # its GPU slots, over 8
    assert (places["pool_in_flight"], places["tenants"]) == (1, 1)
    row = table[table.index(f'data-engine="{name}"') :]
    assert "places from slots" in row[: row.index("</tr>")]
    assert "pool 1 / " in row[: row.index("</tr>")]
