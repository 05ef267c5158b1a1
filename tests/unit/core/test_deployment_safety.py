"""Outside local mode: no placeholder session secret, `/metrics` behind its token, Secure
cookies and HSTS by default; local mode keeps working with nothing configured."""

from __future__ import annotations

import secrets

import pytest
from litestar import Litestar, get
from litestar.testing import TestClient

from loraplex.api.security_headers import security_headers
from loraplex.auth.deployment_checks import refuse_unsafe_settings
from loraplex.errors import exception_handlers
from loraplex.observability.scrape_auth import scrape_guard
from loraplex.settings import DEV_SECRET_KEY, Settings, SettingsError

LOCAL = Settings()  # SQLite, no Redis: the embedded all-in-one
SERVER = Settings(database_url="postgresql+asyncpg://db/loraplex", redis_url="redis://r:6379/0")
GOOD_SECRET = secrets.token_urlsafe(32)


@pytest.mark.parametrize(
    "secret", [DEV_SECRET_KEY, "", "change-me-secret-key", "short-but-random-x9"]
)
def test_a_server_refuses_to_start_on_a_placeholder_secret(secret: str) -> None:
    with pytest.raises(SettingsError, match="LORAPLEX_SECRET_KEY") as refused:
        refuse_unsafe_settings(Settings(**{**_server(), "secret_key": secret}))
    assert "secrets.token_urlsafe" in str(refused.value)  # says how to make one


def test_a_server_starts_on_a_long_random_secret_and_local_mode_on_the_default() -> None:
    refuse_unsafe_settings(Settings(**{**_server(), "secret_key": GOOD_SECRET}))
    refuse_unsafe_settings(LOCAL)


def test_cookies_are_secure_outside_local_mode_unless_turned_off() -> None:
    assert SERVER.cookies_secure and not LOCAL.cookies_secure
    assert not Settings(**{**_server(), "secure_cookies": "false"}).cookies_secure
    assert Settings(secure_cookies="true").cookies_secure


def _server() -> dict[str, str]:
    return {"database_url": SERVER.database_url, "redis_url": SERVER.redis_url}


def _metrics_app(settings: Settings) -> Litestar:
    @get("/metrics", guards=[scrape_guard(settings)])
    async def metrics() -> str:
        return "loraplex_tenant_limit_refusals_total 1"

    return Litestar(
        [metrics],
        exception_handlers=exception_handlers(),
        middleware=[security_headers(settings)],
    )


def test_metrics_are_open_in_local_mode_without_a_token() -> None:
    with TestClient(_metrics_app(LOCAL)) as client:
        assert client.get("/metrics").status_code == 200


def test_metrics_outside_local_mode_need_the_scrape_token() -> None:
    token = secrets.token_urlsafe(16)
    with TestClient(_metrics_app(Settings(**_server(), metrics_token=token))) as client:
        assert client.get("/metrics").status_code == 401
        assert client.get("/metrics", headers={"Authorization": "Bearer x"}).status_code == 401
        ok = client.get("/metrics", headers={"Authorization": f"Bearer {token}"})
        assert ok.status_code == 200
    with TestClient(_metrics_app(SERVER)) as client:  # no token set: closed, and says why
        refused = client.get("/metrics")
        assert refused.status_code == 401 and "LORAPLEX_METRICS_TOKEN" in refused.text


def test_hsts_goes_with_secure_cookies_and_the_other_headers_always() -> None:
    with TestClient(_metrics_app(Settings(**_server(), metrics_token="t"))) as client:
        served = client.get("/metrics", headers={"Authorization": "Bearer t"})
    assert served.headers["strict-transport-security"].startswith("max-age=")
    with TestClient(_metrics_app(LOCAL)) as client:
        local = client.get("/metrics")
    assert "strict-transport-security" not in local.headers
    assert local.headers["x-frame-options"] == "DENY"
    assert local.headers["x-content-type-options"] == "nosniff"
