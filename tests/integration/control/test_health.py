"""Health, readiness, metrics and the OpenAPI document."""

from __future__ import annotations

from litestar.testing import AsyncTestClient

from loraplex.app import create_app
from loraplex.settings import Settings


async def test_healthz_answers_without_a_key(client) -> None:
    response = await client.get("/healthz")
    assert response.status_code == 200 and response.json() == {"status": "ok"}


async def test_readyz_reports_database_and_redis(client) -> None:
    body = (await client.get("/readyz")).json()
    assert body == {"status": "ready", "database": "ok", "redis": "ok"}


async def test_readyz_is_503_when_redis_is_unreachable(settings: Settings) -> None:
    broken = Settings(database_url=settings.database_url, redis_url="redis://127.0.0.1:1/0")
    async with AsyncTestClient(app=create_app(broken)) as client:
        response = await client.get("/readyz")
    assert response.status_code == 503
    assert response.json()["redis"].startswith("error") and response.json()["database"] == "ok"


async def test_metrics_count_requests_by_route_template(client, operator) -> None:
    await operator.get("/api/v1/me")
    text = (await client.get("/metrics")).text
    assert "loraplex_requests_total" in text
    assert 'path="/api/v1/me"' in text


async def test_openapi_document_lists_every_operation_with_an_id(client) -> None:
    schema = (await client.get("/schema/openapi.json")).json()
    operations = [
        op for path in schema["paths"].values() for op in path.values() if isinstance(op, dict)
    ]
    assert operations and all(op.get("operationId") for op in operations)
    assert "/api/v1/tenants" in schema["paths"]
