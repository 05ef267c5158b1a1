"""Headers every response carries, so a browser never sniffs, frames or leaks the console.

Added on `http.response.start`, once per response (an SSE stream's chunks pass untouched).
HSTS only where cookies are `Secure` (`Settings.cookies_secure`): served over HTTPS; over
plain HTTP a browser ignores it, and on a developer's `localhost` it would pin HTTPS for
every other local app on that name.
"""

from __future__ import annotations

from litestar.types import ASGIApp, Message, Receive, Scope, Send

from loraplex.settings import Settings

HSTS = (b"strict-transport-security", b"max-age=31536000; includeSubDomains")
ALWAYS = (
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"content-security-policy", b"frame-ancestors 'none'"),
    (b"referrer-policy", b"same-origin"),
)


def security_headers(settings: Settings) -> type:
    """An ASGI middleware class adding the headers above to every HTTP response."""
    extra = (*ALWAYS, HSTS) if settings.cookies_secure else ALWAYS

    class SecurityHeaders:
        """Adds the security headers to each response that does not set its own."""

        def __init__(self, app: ASGIApp):
            self.app = app

        async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] != "http":
                await self.app(scope, receive, send)
                return

            async def send_with_headers(message: Message) -> None:
                if message["type"] == "http.response.start":
                    headers = list(message.get("headers") or [])
                    present = {name.lower() for name, _ in headers}
                    headers.extend(h for h in extra if h[0] not in present)
                    message = {**message, "headers": headers}
                await send(message)

            await self.app(scope, receive, send_with_headers)

    return SecurityHeaders
