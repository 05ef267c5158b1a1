"""Health, readiness, metrics and the OpenAPI document."""

from __future__ import annotations

from dataclasses import replace

from litestar.testing import AsyncTestClient

from loraplex.app import create_app
from loraplex.settings import Settings
from tests.conftest import SCRAPE


async def test_healthz_answers_without_a_key(client) -> None:
    response = await client.get("/healthz")
    assert response.status_code == 200 and response.json() == {"status": "ok"}


async def test_readyz_reports_database_and_redis(client) -> None:
    body = (await client.get("/readyz")).json()
    assert body == {"status": "ready", "database": "ok", "redis": "ok"}


async def test_readyz_stays_200_when_redis_is_unreachable(settings: Settings) -> None:
    # Redis is shared by every replica: readiness failing on it would empty the Service.
    broken = replace(settings, redis_url="redis://127.0.0.1:1/0")
    async with AsyncTestClient(app=create_app(broken)) as client:
        response = await client.get("/readyz")
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "degraded" and body["redis"].startswith("error")
    assert body["database"] == "ok"


async def test_readyz_stays_200_when_the_database_is_unreachable(settings: Settings) -> None:
    broken = replace(settings, database_url="postgresql+asyncpg://nobody:x@127.0.0.1:1/none")
    async with AsyncTestClient(app=create_app(broken)) as client:
        response = await client.get("/readyz")
    assert response.status_code == 200
    assert response.json()["status"] == "degraded"
    assert response.json()["database"].startswith("error")


async def test_dependencies_are_503_when_redis_is_unreachable(settings: Settings) -> None:
    broken = replace(settings, redis_url="redis://127.0.0.1:1/0")
    async with AsyncTestClient(app=create_app(broken)) as client:
        response = await client.get("/readyz/dependencies")
    assert response.status_code == 503
    assert response.json()["redis"].startswith("error") and response.json()["database"] == "ok"


async def test_dependencies_are_200_when_both_answer(client) -> None:
    response = await client.get("/readyz/dependencies")
    assert response.status_code == 200 and response.json()["status"] == "ready"


async def test_healthz_stays_200_when_redis_is_unreachable(settings: Settings) -> None:
    broken = replace(settings, redis_url="redis://127.0.0.1:1/0")
    async with AsyncTestClient(app=create_app(broken)) as client:
        assert (await client.get("/healthz")).status_code == 200


async def test_metrics_count_requests_by_route_template(client, operator) -> None:
    await operator.get("/api/v1/me")
    text = (await client.get("/metrics", headers=SCRAPE)).text
    assert "loraplex_requests_total" in text
    assert 'path="/api/v1/me"' in text


async def test_metrics_refuse_a_scrape_without_the_token(client, operator) -> None:
    for headers in ({}, {"Authorization": "Bearer not-the-token"}, operator._headers(None)):
        response = await client.get("/metrics", headers=headers)
        assert response.status_code == 401
        assert "LORAPLEX_METRICS_TOKEN" in response.json()["detail"]
        assert "loraplex_" not in response.text


async def test_every_response_carries_the_security_headers(client) -> None:
    response = await client.get("/login")
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["x-frame-options"] == "DENY"
    assert "frame-ancestors 'none'" in response.headers["content-security-policy"]
    assert response.headers["referrer-policy"] == "same-origin"
    # The suite serves plain HTTP (secure_cookies="false"): no HSTS there.
    assert "strict-transport-security" not in response.headers


async def test_openapi_document_lists_every_operation_with_an_id(client) -> None:
    schema = (await client.get("/schema/openapi.json")).json()
    operations = [
        op for path in schema["paths"].values() for op in path.values() if isinstance(op, dict)
    ]
    assert operations and all(op.get("operationId") for op in operations)
    assert "/api/v1/tenants" in schema["paths"]
