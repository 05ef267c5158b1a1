"""The console's one way to this process's live placement (None where it places nothing)."""

from __future__ import annotations

from typing import Any

from litestar import Request

from loraplex.serving.live import LivePlacement


def provide_live_placement(request: Request[Any, Any, Any]) -> LivePlacement | None:
    """This process's live placement, or None where it runs no engines (no map to show)."""
    placement = request.app.state.get("placement")
    return placement if isinstance(placement, LivePlacement) else None
