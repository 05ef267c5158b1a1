"""A real OpenID Provider on loopback: the npm package `oidc-provider` under Node, run by
tests/support/oidc/provider.mjs (`make oidc` installs its node_modules).

Besides the provider's own endpoints, the script lets a test create and delete accounts,
sign one in at the interaction step, and have the next ID token re-signed with a wrong
audience, an expiry in the past or a key the provider does not publish.
"""

from __future__ import annotations

import secrets
import shutil
import subprocess
from pathlib import Path
from typing import Any

import httpx

from tests.support.s3_server import free_port

HERE = Path(__file__).parent / "oidc"
NODE = shutil.which("node")
INSTALLED = (HERE / "node_modules" / "oidc-provider").is_dir()
STARTUP_TIMEOUT_S = 30.0


class OidcProviderProcess:
    """`node provider.mjs` on a free loopback port, with one confidential client."""

    def __init__(self, redirect_uri: str) -> None:
        self.port = free_port()
        self.redirect_uri = redirect_uri
        self.client_id = "loraplex-console"
        self.client_secret = secrets.token_urlsafe(32)
        self._process: subprocess.Popen[str] | None = None

    @property
    def issuer(self) -> str:
        """The provider's issuer URL (also its base URL)."""
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> OidcProviderProcess:
        args = [str(NODE), "provider.mjs", str(self.port), self.redirect_uri, self.client_id,
                self.client_secret]  # fmt: skip
        self._process = subprocess.Popen(
            args,
            cwd=HERE,
            stdin=subprocess.PIPE,  # closed when this process ends: the provider exits then
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        assert self._process.stdout is not None
        line = self._process.stdout.readline()  # "ready <issuer>", or "" if it died
        if not line.startswith("ready"):
            self.__exit__()
            raise RuntimeError("the OpenID Provider did not start (run `make oidc`)")
        return self

    def __exit__(self, *exc_info: object) -> None:
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.terminate()
            process.wait(timeout=10)

    def put_account(self, account_id: str, **claims: Any) -> None:
        """Create or replace an account (claims: email, email_verified, name, groups)."""
        self._send("PUT", f"/test/accounts/{account_id}", claims)

    def forget_account(self, account_id: str) -> None:
        """The provider no longer knows the account (its refresh tokens stop working)."""
        self._send("DELETE", f"/test/accounts/{account_id}", None)

    def tamper_next_id_token(self, **change: Any) -> None:
        """Re-sign the next ID token with `claims={...}` replaced, `expired=True` or
        `foreign_key=True` (a key the provider does not publish)."""
        self._send("POST", "/test/tamper", change)

    def _send(self, method: str, path: str, body: Any) -> None:
        response = httpx.request(method, self.issuer + path, json=body, timeout=10)
        assert response.status_code == 204, response.text
