"""Dependencies every controller may ask for."""

from __future__ import annotations

from typing import Any

from litestar import Request

from loraplex.adapters.store import ObjectStore, open_store
from loraplex.auth.principal import Principal
from loraplex.errors import Unauthenticated
from loraplex.settings import Settings


def provide_principal(request: Request[Any, Any, Any]) -> Principal:
    """The authenticated caller of this request."""
    user = request.scope.get("user")
    if not isinstance(user, Principal):
        raise Unauthenticated("missing API key")
    return user


def provide_settings(request: Request[Any, Any, Any]) -> Settings:
    """The process's settings."""
    settings: Settings = request.app.state.settings
    return settings


def provide_store(request: Request[Any, Any, Any]) -> ObjectStore:
    """The adapter object store."""
    store: ObjectStore = request.app.state.store
    return store


def open_object_store(settings: Settings) -> ObjectStore:
    """The object store the settings name: a local directory (embedded) or S3."""
    if settings.object_store == "s3":
        return open_store(
            "s3",
            bucket=settings.s3_bucket,
            endpoint_url=settings.s3_endpoint_url or None,
            region=settings.s3_region,
            access_key=settings.s3_access_key_id or None,
            secret_key=settings.s3_secret_access_key or None,
            create_bucket=True,
        )
    return open_store("local", root=settings.data_dir / "objects")
