"""Errors as named values, mapped to HTTP once.

Domain code raises a `LoraplexError` subclass; `exception_handlers()` turns it (and the
framework's and the repository layer's own errors) into an RFC 9457 problem document on the
control plane and into OpenAI's error shape on `/v1`, so no error ever becomes a bare 500.
"""

from __future__ import annotations

import logging
from typing import Any
from uuid import UUID

from advanced_alchemy import exceptions as repo_errors
from litestar import MediaType, Request, Response
from litestar.exceptions import HTTPException, ValidationException
from redis.exceptions import RedisError
from sqlalchemy.exc import DBAPIError

from loraplex.adapters.errors import AdapterRejected, StoreError, StoreUnavailable
from loraplex.observability.metrics import count_limit_refusal

log = logging.getLogger("loraplex.errors")


class LoraplexError(Exception):
    """Base of every error the platform raises on purpose."""

    status_code = 500
    code = "internal_error"
    # Set on a refusal that wrote its own audit entry (in its request's transaction), so the
    # mapper does not note it in the tenant's audit log again (`control.audit.limit_log`).
    audited = False

    def __init__(
        self, detail: str, *, param: str | None = None, headers: dict[str, str] | None = None
    ):
        super().__init__(detail)
        self.detail = detail
        self.param = param
        self.headers = headers or {}


class InvalidInput(LoraplexError):
    """The request is well-formed but a value is not acceptable."""

    status_code = 400
    code = "invalid_request"


class Unauthenticated(LoraplexError):
    """No credentials, or credentials that do not identify anyone."""

    status_code = 401
    code = "invalid_api_key"


class Forbidden(LoraplexError):
    """Authenticated, but the key lacks the scope for this action."""

    status_code = 403
    code = "forbidden"


class NotFound(LoraplexError):
    """The object does not exist or belongs to another tenant (never told apart)."""

    status_code = 404
    code = "not_found"


class Conflict(LoraplexError):
    """The change collides with existing state (duplicate name, wrong status)."""

    status_code = 409
    code = "conflict"


class PayloadTooLarge(LoraplexError):
    """A body or file is over its size cap."""

    status_code = 413
    code = "payload_too_large"


class QuotaExceeded(LoraplexError):
    """The tenant's plan does not allow this (adapters, storage, rank, ...)."""

    status_code = 403
    code = "quota_exceeded"


class TooManyRequests(LoraplexError):
    """Too many attempts in a short time (sign-ins, password checks); wait and retry."""

    status_code = 429
    code = "rate_limit_exceeded"


class ClientGone(LoraplexError):
    """The client closed its connection before its request body ended (nginx's 499)."""

    status_code = 400
    code = "client_closed_request"


class Unavailable(LoraplexError):
    """A dependency (database, Redis, object store, engine) is not answering."""

    status_code = 503
    code = "service_unavailable"


def _problem(
    request: Request[Any, Any, Any],
    status: int,
    code: str,
    detail: str,
    param: str | None = None,
    extra: Any = None,
    headers: dict[str, str] | None = None,
) -> Response[Any]:
    """Render an error in the shape the route's clients expect."""
    if request.url.path.startswith("/v1/"):
        body: dict[str, Any] = {
            "error": {"message": detail, "type": _openai_type(status), "param": param, "code": code}
        }
        media_type = MediaType.JSON
    else:
        body = {
            "type": f"urn:loraplex:problem:{code}",
            "title": code.replace("_", " "),
            "status": status,
            "detail": detail,
        }
        if param:
            body["param"] = param
        if extra:
            body["errors"] = extra
        media_type = "application/problem+json"
    return Response(body, status_code=status, media_type=media_type, headers=headers)


def _openai_type(status: int) -> str:
    if status == 401:
        return "authentication_error"
    if status == 403:
        return "permission_error"
    if status == 404:
        return "not_found_error"
    if status == 429:
        return "rate_limit_error"
    if status >= 500:
        return "server_error"
    return "invalid_request_error"


def _on_domain_error(request: Request[Any, Any, Any], exc: LoraplexError) -> Response[Any]:
    if _is_limit(exc.status_code, exc.code) and not exc.audited:
        # 429s are counted where they are decided (admission, uploads, resume readers)
        _note_limit(request, exc.code, exc.detail, counted=exc.status_code == 429)
    return _problem(request, exc.status_code, exc.code, exc.detail, exc.param, headers=exc.headers)


# Refusals that are a tenant tripping a limit (as opposed to a malformed request).
LIMIT_STATUSES = frozenset({413, 429})
LIMIT_CODES = frozenset(
    {"quota_exceeded", "body_too_complex", "schema_too_complex", "upload_too_slow"}
)


def _is_limit(status: int, code: str) -> bool:
    """Whether a refusal is a tenant tripping a limit, not a malformed request."""
    return status in LIMIT_STATUSES or code in LIMIT_CODES


def _note_limit(request: Request[Any, Any, Any], limit: str, detail: str, *, counted: bool) -> None:
    """Count a tenant's limit refusal on `loraplex_tenant_limit_refusals_total` (unless it was
    `counted` where it was decided) and note it in the tenant's audit log (throttled there)."""
    services = getattr(request.app.state, "services", None)
    limit_log = getattr(services, "limit_log", None)
    user = request.scope.get("user")
    tenant = getattr(user, "tenant_id", None) or request.path_params.get("tenant_id")
    if limit_log is None or tenant is None:
        return
    try:
        tenant_id = tenant if isinstance(tenant, UUID) else UUID(str(tenant))
    except ValueError:
        return
    if not counted:
        count_limit_refusal(limit, limit_log.label(tenant_id))
    limit_log.note(tenant_id, str(getattr(user, "actor", "anonymous")), limit, detail)


def _on_http_error(request: Request[Any, Any, Any], exc: HTTPException) -> Response[Any]:
    if exc.status_code >= 500:
        log.error(
            "HTTP %s on %s %s: %s",
            exc.status_code,
            request.method,
            request.url.path,
            exc.detail,
            exc_info=exc,
        )
    extra = exc.extra if isinstance(exc, ValidationException) else None
    code = {
        400: "invalid_request",
        401: "invalid_api_key",
        403: "forbidden",
        404: "not_found",
        405: "method_not_allowed",
        413: "payload_too_large",
        415: "unsupported_media_type",
        429: "rate_limit_exceeded",
    }.get(exc.status_code, "http_error")
    detail = exc.detail
    if extra and isinstance(extra, list):
        detail = "; ".join(_describe(item) for item in extra) or detail
    if exc.status_code == 413:  # Litestar's own body-size limit
        _note_limit(request, code, str(detail), counted=False)
    return _problem(
        request, exc.status_code, code, detail, extra=extra, headers=dict(exc.headers or {})
    )


def _describe(item: Any) -> str:
    if isinstance(item, dict):
        key = item.get("key")
        message = item.get("message", "")
        return f"{key}: {message}" if key else str(message)
    return str(item)


def _on_repository_error(
    request: Request[Any, Any, Any], exc: repo_errors.RepositoryError
) -> Response[Any]:
    if isinstance(exc, repo_errors.NotFoundError):
        return _problem(request, 404, "not_found", "not found")
    if _is_unstorable_text(exc):  # advanced-alchemy wraps it as an IntegrityError
        return _problem(request, 400, "invalid_request", NUL_IN_TEXT)
    if isinstance(exc, repo_errors.IntegrityError | repo_errors.DuplicateKeyError):
        return _problem(request, 409, "conflict", "conflicts with an existing object")
    log.exception("repository error", exc_info=exc)
    return _problem(request, 500, "internal_error", "internal error")


# PostgreSQL cannot hold or compare these in text (SQLSTATE 22021, 22P05): NUL above all.
UNSTORABLE_TEXT = frozenset({"22021", "22P05"})
NUL_IN_TEXT = "text must not contain the NUL character (\\u0000)"


def _is_unstorable_text(exc: BaseException | None) -> bool:
    """Whether PostgreSQL refused a text value, here or in what this error wraps."""
    while exc is not None:
        if isinstance(exc, DBAPIError) and getattr(exc.orig, "sqlstate", None) in UNSTORABLE_TEXT:
            return True
        exc = exc.__cause__
    return False


NUMBER_OUT_OF_RANGE = "a number in the request is out of range (too large or too small to store)"


def _is_number_out_of_range(exc: BaseException | None) -> bool:
    """Whether a number of the request did not fit its column: asyncpg refuses to encode it
    (an OverflowError under its DataError, e.g. a 4,300-digit version number) or PostgreSQL
    refuses it (SQLSTATE 22003)."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OverflowError):
            return True
        if getattr(getattr(exc, "orig", None), "sqlstate", None) == "22003":
            return True
        exc = exc.__cause__ or exc.__context__ or getattr(exc, "orig", None)
    return False


def _on_database_error(request: Request[Any, Any, Any], exc: DBAPIError) -> Response[Any]:
    """Text or numbers PostgreSQL refuses are the client's to fix; a database that is down or
    restarting is a 503 the client may retry; any other database error is ours."""
    if _is_unstorable_text(exc):
        return _problem(request, 400, "invalid_request", NUL_IN_TEXT)
    if _is_number_out_of_range(exc):
        return _problem(request, 400, "invalid_request", NUMBER_OUT_OF_RANGE)
    if _is_database_down(exc):
        return _on_dependency_down(request, exc)
    return _on_unexpected(request, exc)


# SQLSTATE class 08 (connection exception) and 57P01-57P03 (shutting down, cannot connect
# now): what a request sees while PostgreSQL restarts (tests/system/test_postgres_restart.py).
DATABASE_DOWN_STATES = ("08", "57P01", "57P02", "57P03")


def _is_database_down(exc: DBAPIError) -> bool:
    """Whether the database dropped, refused or is not yet taking connections."""
    state = str(getattr(exc.orig, "sqlstate", "") or "")
    return bool(exc.connection_invalidated) or state.startswith(DATABASE_DOWN_STATES)


def _on_dependency_down(request: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    """A backing service refused or dropped the connection (asyncpg raises the socket's own
    `ConnectionRefusedError` while PostgreSQL is down): 503, the cause only in the log."""
    log.warning(
        "a backing service is unreachable on %s %s: %s: %s",
        request.method,
        request.url.path,
        type(exc).__name__,
        exc,
    )
    return _problem(
        request,
        503,
        "service_unavailable",
        "a backing service is unavailable; retry shortly",
        headers={"Retry-After": "5"},
    )


def _on_unexpected(request: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    log.exception("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    return _problem(request, 500, "internal_error", "internal error")


def _on_too_deep(request: Request[Any, Any, Any], exc: RecursionError) -> Response[Any]:
    # The JSON decoders (msgspec, json) refuse nesting past their recursion limit by raising
    # RecursionError while decoding a body; nothing of ours recurses on a bounded input.
    log.warning("nesting too deep on %s %s: %s", request.method, request.url.path, exc)
    return _problem(request, 400, "invalid_request", "the request body nests too deep")


def _on_adapter_rejected(request: Request[Any, Any, Any], exc: AdapterRejected) -> Response[Any]:
    status = 413 if exc.code == "too_large" else 422
    _note_limit(request, f"upload_{exc.code}", exc.message, counted=False)
    return _problem(request, status, str(exc.code), exc.message)


def _on_store_error(request: Request[Any, Any, Any], exc: StoreError) -> Response[Any]:
    # The store's own message names its endpoint and object keys: it goes to the log only.
    if isinstance(exc, StoreUnavailable):
        log.warning("object store unavailable on %s %s: %s", request.method, request.url.path, exc)
        return _problem(
            request,
            503,
            "object_store_unavailable",
            "object store unavailable; retry shortly",
            headers={"Retry-After": "30"},
        )
    log.error("object store error on %s %s: %s", request.method, request.url.path, exc)
    return _problem(request, 502, "object_store_error", "object store error")


def exception_handlers() -> dict[type[Exception], Any]:
    """The one mapping from exceptions to HTTP responses, for `Litestar(exception_handlers=)`."""
    return {
        LoraplexError: _on_domain_error,
        HTTPException: _on_http_error,
        repo_errors.RepositoryError: _on_repository_error,
        AdapterRejected: _on_adapter_rejected,
        StoreError: _on_store_error,
        RecursionError: _on_too_deep,
        DBAPIError: _on_database_error,
        ConnectionError: _on_dependency_down,
        # Redis down, or every connection of a capped pool busy past its wait
        # (`connections.connect_redis`): the same 503, never a hang or a 500.
        RedisError: _on_dependency_down,
        Exception: _on_unexpected,
    }
