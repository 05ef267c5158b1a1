"""Dependencies every controller may ask for."""

from __future__ import annotations

from typing import Any

from litestar import Request

from loraplex.auth.principal import Principal
from loraplex.errors import Unauthenticated


def provide_principal(request: Request[Any, Any, Any]) -> Principal:
    """The authenticated caller of this request."""
    user = request.scope.get("user")
    if not isinstance(user, Principal):
        raise Unauthenticated("missing API key")
    return user
