"""Dependencies every handler may ask for, and the one way to the process's services.

Handlers name what they need as parameters — `gateway: Gateway`, `job_queue: JobQueue`,
`settings: Settings` — and `service_dependencies()` provides each from the app's `Services`
(loraplex.services). Middleware and guards, which take no dependencies, call `services_of`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from litestar import Litestar, Request
from litestar.di import Provide

from loraplex.auth.principal import Principal
from loraplex.errors import Unauthenticated

if TYPE_CHECKING:
    from loraplex.services import Services

# The fields of `Services` that handlers take as parameters of the same name.
SERVICE_DEPENDENCIES = (
    "settings",
    "store",
    "cpu_pool",
    "gateway",
    "tenant_limits",
    "job_queue",
    "registry",
    "placement",
    "sign_in_throttle",
    "redis",
    "budgets",
)


def provide_principal(request: Request[Any, Any, Any]) -> Principal:
    """The authenticated caller of this request."""
    user = request.scope.get("user")
    if not isinstance(user, Principal):
        raise Unauthenticated("missing API key")
    return user


def services_of(app: Litestar) -> Services:
    """The app's running services (set by the app's lifespan)."""
    services: Services = app.state.services
    return services


def _provider(name: str) -> Provide:
    def provide(request: Request[Any, Any, Any]) -> Any:
        return getattr(services_of(request.app), name)

    provide.__name__ = f"provide_{name}"
    return Provide(provide, sync_to_thread=False)


def service_dependencies() -> dict[str, Provide]:
    """A dependency per name in `SERVICE_DEPENDENCIES`, read from the app's services."""
    return {name: _provider(name) for name in SERVICE_DEPENDENCIES}
