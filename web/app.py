"""The browser UI as one Litestar router: sessions, CSRF, templates, static files, errors.

Mounted by the app factory beside the API. Its routes are reached with a session cookie,
never an API key (`access.SESSION`); the bearer-key middleware skips `WEB_PATHS`.
"""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path
from typing import Any

from advanced_alchemy.exceptions import (
    DuplicateKeyError,
    IntegrityError,
    NotFoundError,
    RepositoryError,
)
from litestar import Request, Response, Router
from litestar.config.csrf import CSRFConfig
from litestar.di import Provide
from litestar.exceptions import HTTPException
from litestar.middleware.base import DefineMiddleware
from litestar.middleware.csrf import CSRFMiddleware
from litestar.plugins.jinja import JinjaTemplateEngine
from litestar.response import Redirect, Template
from litestar.static_files import create_static_files_router
from litestar.template.config import TemplateConfig

from loraplex.adapters.errors import AdapterRejected, StoreError
from loraplex.auth import access
from loraplex.errors import LoraplexError
from loraplex.settings import Settings
from loraplex.web.account import AccountController
from loraplex.web.adapter_page import AdapterPage
from loraplex.web.adapters import AdapterPages
from loraplex.web.admin import AdminController
from loraplex.web.console import ConsoleController
from loraplex.web.engines import EnginePages
from loraplex.web.evals import EvalPages
from loraplex.web.finetunes import FineTuneController
from loraplex.web.forms import install_form_parser, provide_form
from loraplex.web.login import LoginController
from loraplex.web.plans import PlanPages
from loraplex.web.session import (
    SignInRequired,
    provide_editor,
    provide_operator,
    provide_viewer,
    session_config,
)
from loraplex.web.spend import SpendPages
from loraplex.web.sso import SsoController

HERE = Path(__file__).parent
# Front-end libraries come from npm (`make install` runs `npm ci` in web/), never the repo.
VENDOR = HERE / "node_modules" / "htmx.org" / "dist"
log = logging.getLogger("loraplex.web")
WEB_PATHS = ["^/$", "^/login", "^/logout", "^/account", "^/console", "^/admin", "^/static/"]


def template_config() -> TemplateConfig[JinjaTemplateEngine]:
    """Jinja2 templates from web/templates (autoescaped)."""
    return TemplateConfig(directory=HERE / "templates", engine=JinjaTemplateEngine)


def web_router(settings: Settings) -> Router:
    """Sign-in, the tenant console and the admin UI, with their session and CSRF middleware."""
    install_form_parser()  # bounded and uncached (web/forms.py): the forms come from anyone
    csrf = CSRFConfig(
        secret=hashlib.sha256(b"csrf:" + settings.secret_key.encode()).hexdigest(),
        cookie_samesite="strict",
        cookie_secure=settings.cookies_secure,
    )
    pages = Router(
        path="/",
        route_handlers=[
            AccountController,
            ConsoleController,
            SpendPages,
            AdapterPages,
            AdapterPage,
            FineTuneController,
            EvalPages,
            AdminController,
            PlanPages,
            EnginePages,
        ],
        dependencies={
            "viewer": Provide(provide_viewer),
            "editor": Provide(provide_editor, sync_to_thread=False),
            "operator": Provide(provide_operator, sync_to_thread=False),
            "form": Provide(provide_form),
        },
    )
    return Router(
        path="/",
        route_handlers=[
            LoginController,
            SsoController,
            pages,
            create_static_files_router(
                path="/static", directories=[HERE / "static", VENDOR], opt=access.SESSION
            ),
        ],
        opt=access.SESSION,
        middleware=[
            session_config(settings).middleware,
            DefineMiddleware(CSRFMiddleware, config=csrf),
        ],
        exception_handlers={
            LoraplexError: _on_error,
            AdapterRejected: _on_error,
            StoreError: _on_error,
            HTTPException: _on_error,
            RepositoryError: _on_error,
        },
        include_in_schema=False,
    )


def _on_error(request: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    """Errors as a message in the page (htmx swaps it in), or the sign-in page."""
    if isinstance(exc, SignInRequired):
        if request.headers.get("hx-request"):
            return Response(b"", status_code=401, headers={"HX-Redirect": "/login"})
        return Redirect("/login")
    status, message = _status_and_message(exc)
    context = {"status": status, "message": message}
    if request.headers.get("hx-request"):  # shown above the page, whatever the form targeted
        headers = {"HX-Retarget": "#flash", "HX-Reswap": "innerHTML"}
        return Template("_error.html", context=context, status_code=status, headers=headers)
    return Template("error.html", context=context, status_code=status)


def _status_and_message(exc: Exception) -> tuple[int, str]:
    if isinstance(exc, LoraplexError):
        return exc.status_code, exc.detail
    if isinstance(exc, HTTPException):
        return exc.status_code, str(exc.detail)
    if isinstance(exc, AdapterRejected):
        return (413 if exc.code == "too_large" else 422), exc.message
    if isinstance(exc, StoreError):
        log.error("object store error in the console: %s", exc)
        return 503, "the object store is unavailable; try again shortly"
    if isinstance(exc, NotFoundError):
        return 404, "not found"
    if isinstance(exc, IntegrityError | DuplicateKeyError):
        return 409, "that conflicts with something that already exists"
    log.exception("repository error in the console", exc_info=exc)
    return 500, "internal error"
