"""The engines page names what an engine's correctness probes failed on."""

from __future__ import annotations

import secrets

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from loraplex.serving.probes import ProbeStore
from loraplex.serving.probes.verdict import Judgement, Verdict
from tests.conftest import Api
from tests.integration.web.conftest import htmx, sign_in
from tests.support.adapter_api import ensure_tiny_base

NOWHERE = "http://127.0.0.1:9"  # nothing listens: the engine is registered, never in rotation


async def test_an_engine_whose_base_model_probes_failed_says_so_on_the_engines_page(
    browser_client,
    operator: Api,
    operator_user,
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    base = await ensure_tiny_base(operator)
    await sign_in(browser_client, operator_user.email, operator_user.password)
    name = f"probed-{secrets.token_hex(3)}"
    form = {"name": name, "url": NOWHERE, "kind": "vllm", "base_model": base}
    await browser_client.post("/admin/engines/", data=form, headers=htmx(browser_client))
    engines = (await operator.get("/api/v1/engines", params={"page_size": 100})).json()["items"]
    engine_id = next(e["id"] for e in engines if e["name"] == name)

    failed = Judgement(Verdict.FAILED, matched=1, differed=3, unanswered=0)
    await ProbeStore(sessions).save_replay(engine_id, name, None, failed)

    try:
        page = (await browser_client.get("/admin/engines/live")).text
    finally:
        await browser_client.post(
            f"/admin/engines/{engine_id}/remove", headers=htmx(browser_client)
        )
    row = page[page.index(f'data-engine="{name}"') :].split("</tr>")[0]
    assert "wrong answers: base model (3 of 4 probes)" in row
