"""The Litestar application factory."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from advanced_alchemy.extensions.litestar import SQLAlchemyPlugin
from litestar import Litestar, Router
from litestar.di import Provide
from litestar.logging.config import LoggingConfig
from litestar.middleware.base import DefineMiddleware
from litestar.openapi.plugins import ScalarRenderPlugin
from litestar.plugins.prometheus import PrometheusConfig, PrometheusController

from loraplex.api.deps import provide_principal, service_dependencies
from loraplex.api.openapi import LoraplexOpenAPIConfig
from loraplex.api.paging import provide_page
from loraplex.api.security_headers import security_headers
from loraplex.auth.access import PUBLIC, check_access
from loraplex.auth.deployment_checks import refuse_unsafe_settings
from loraplex.auth.middleware import BearerKeyMiddleware
from loraplex.control.adapters.controller import AdapterController
from loraplex.control.audit.controller import AuditController
from loraplex.control.base_models.controller import BaseModelController
from loraplex.control.budgets.controller import BudgetController, PriceController
from loraplex.control.engines.agents import AgentController
from loraplex.control.engines.controller import EngineController
from loraplex.control.engines.placement import PlacementController
from loraplex.control.health import HealthController
from loraplex.control.keys.controller import ApiKeyController
from loraplex.control.nodes.controller import NodeCredentialController
from loraplex.control.tenants.controller import PlanController, TenantController
from loraplex.control.usage.controller import UsageController
from loraplex.control.users.controller import UserController
from loraplex.db.config import sqlalchemy_config
from loraplex.errors import exception_handlers
from loraplex.evals.controller import EvalsController
from loraplex.finetune.controller import FineTuningController
from loraplex.gateway.controller import InferenceController
from loraplex.gateway.responses_controller import ResponsesController
from loraplex.observability.gc_pauses import count_pauses, freeze_the_startup_heap
from loraplex.observability.scrape_auth import scrape_guard
from loraplex.services import running_services
from loraplex.settings import Settings
from loraplex.web.app import WEB_PATHS, template_config, web_router

log = logging.getLogger("loraplex.app")

CONTROLLERS: list[type] = [
    HealthController,
    AdapterController,
    TenantController,
    PlanController,
    UserController,
    ApiKeyController,
    BaseModelController,
    AuditController,
    UsageController,
    PriceController,
    BudgetController,
    EngineController,
    AgentController,
    NodeCredentialController,
    PlacementController,
    InferenceController,
    ResponsesController,
    FineTuningController,
    EvalsController,
]


def metrics_controller(settings: Settings) -> type[PrometheusController]:
    """`GET /metrics` in the Prometheus text format, for the scrape token only
    (`loraplex.observability.scrape_auth`)."""

    class MetricsController(PrometheusController):
        """`GET /metrics` in the Prometheus text format."""

        path = "/metrics"
        opt = PUBLIC
        include_in_schema = False
        guards = [scrape_guard(settings)]

    return MetricsController


def create_app(settings: Settings | None = None) -> Litestar:
    """Build the API application from settings (default: the environment)."""
    settings = settings or Settings.from_env()
    refuse_unsafe_settings(settings)
    db = sqlalchemy_config(settings)

    @asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        async with running_services(settings, db) as services:
            app.state.services = services
            count_pauses()
            frozen = freeze_the_startup_heap()
            log.info("garbage collector: %d objects of start-up exempted", frozen)
            try:
                yield
            finally:
                del app.state.services

    prometheus = PrometheusConfig(
        app_name="loraplex",
        prefix="loraplex",
        group_path=True,
        # Streamed inference is left out: this middleware's send wrapper would run on every
        # SSE chunk, and the gateway counts those requests itself (loraplex_inference_*).
        exclude=["/metrics", "/healthz", "/readyz", "^/v1/((chat/)?completions|responses)"],
    )
    return Litestar(
        route_handlers=[*CONTROLLERS, metrics_controller(settings), web_router(settings)],
        plugins=[SQLAlchemyPlugin(config=db)],
        dependencies={
            "principal": Provide(provide_principal, sync_to_thread=False),
            **service_dependencies(),
            "page": Provide(provide_page, sync_to_thread=False),
        },
        middleware=[
            security_headers(settings),
            prometheus.middleware,
            DefineMiddleware(
                BearerKeyMiddleware,
                exclude=[
                    "^/healthz",
                    "^/readyz",
                    "^/metrics",
                    "^/schema",
                    "^/api/v1/agents/",
                    *WEB_PATHS,
                ],
            ),
        ],
        guards=[check_access],
        exception_handlers=exception_handlers(),
        template_config=template_config(),
        lifespan=[lifespan],
        openapi_config=LoraplexOpenAPIConfig(
            title="Loraplex",
            version="0.1.0",
            path="/schema",
            render_plugins=[ScalarRenderPlugin()],
            # The document describes the API, not the pages that render the document.
            openapi_router=Router(
                "/schema", route_handlers=[], opt=PUBLIC, include_in_schema=False
            ),
        ),
        request_max_body_size=settings.max_json_body_bytes,
        logging_config=LoggingConfig(
            root={"level": "WARNING", "handlers": ["queue_listener"]},
            loggers={"loraplex": {"level": "INFO", "propagate": True}},
            log_exceptions="debug",  # errors.py logs what matters once, with context
        ),
        debug=settings.debug,
    )
