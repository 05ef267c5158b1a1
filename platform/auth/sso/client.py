"""One identity provider, spoken to with Authlib: discovery, the authorization URL (PKCE
S256, state, nonce), the code exchange, refresh, and the ID token's checks.

The ID token is checked with joserfc (Authlib's JOSE library) and Authlib's `CodeIDToken`
rules: the signature against the provider's JWKS (fetched again once for an unknown key id,
so a key rotation works), the issuer, the audience (this client, and `azp` when there are
several), expiry and issue time with `LEEWAY_S` of clock skew, the nonce and `at_hash`.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from authlib.integrations.base_client import OAuthError
from authlib.integrations.httpx_client import AsyncOAuth2Client
from authlib.oidc.core import CodeIDToken
from joserfc import jwt
from joserfc.errors import (
    BadSignatureError,
    ClaimError,
    ExpiredTokenError,
    InvalidKeyIdError,
    JoseError,
)
from joserfc.jwk import KeySet
from joserfc.jws import JWSRegistry

from loraplex.auth.sso.config import OidcProvider
from loraplex.auth.sso.mapping import ProviderUnavailable, SignInFailed

log = logging.getLogger("loraplex.sso")
LEEWAY_S = 60
TIMEOUT_S = 10.0
METADATA_TTL_S = 3600.0  # the discovery document is read again after this (key rotations)


class ProviderRefused(Exception):
    """The provider answered a token request with an OAuth error (e.g. `invalid_grant`)."""

    def __init__(self, error: str):
        super().__init__(error)
        self.error = error


class OidcClient:
    """Loraplex as a relying party of one provider."""

    def __init__(self, provider: OidcProvider):
        self.provider = provider
        self._metadata: dict[str, Any] = {}
        self._metadata_at = 0.0
        self._jwks: KeySet | None = None

    async def check(self) -> int:
        """Read the discovery document and the JWKS now: the number of keys published."""
        self._metadata = {}
        await self._metadata_doc()
        return len((await self._keys(refetch=True)).keys)

    async def authorization_url(
        self, redirect_uri: str, state: str, nonce: str, code_verifier: str
    ) -> str:
        """Where to send the browser to sign in."""
        endpoint = (await self._metadata_doc())["authorization_endpoint"]
        async with self._oauth(redirect_uri) as client:
            url, _state = client.create_authorization_url(
                endpoint, state=state, nonce=nonce, code_verifier=code_verifier
            )
        return str(url)

    async def exchange(self, code: str, code_verifier: str, redirect_uri: str) -> dict[str, Any]:
        """The tokens for an authorization code (ProviderRefused when the provider says no)."""
        endpoint = (await self._metadata_doc())["token_endpoint"]
        async with self._oauth(redirect_uri) as client:
            return await self._call(
                client.fetch_token(
                    endpoint,
                    grant_type="authorization_code",
                    code=code,
                    code_verifier=code_verifier,
                )
            )

    async def refresh(self, refresh_token: str) -> dict[str, Any]:
        """New tokens for a refresh token (ProviderRefused: the grant is gone)."""
        endpoint = (await self._metadata_doc())["token_endpoint"]
        async with self._oauth() as client:
            return await self._call(client.refresh_token(endpoint, refresh_token=refresh_token))

    async def userinfo(self, access_token: str) -> dict[str, Any]:
        """The userinfo endpoint's claims for an access token."""
        endpoint = (await self._metadata_doc())["userinfo_endpoint"]
        async with self._oauth() as client:
            client.token = {"access_token": access_token, "token_type": "Bearer"}
            response = await self._call(client.get(endpoint))
        if response.status_code in (401, 403):  # the token (and the grant) is not honoured
            raise ProviderRefused(f"userinfo answered {response.status_code}")
        if response.status_code != 200:
            log.warning("%s userinfo answered %s", self.provider.name, response.status_code)
            raise ProviderUnavailable(f"{self.provider.button_label} did not answer properly")
        claims: dict[str, Any] = response.json()
        return claims

    async def id_token_claims(self, token: dict[str, Any], nonce: str | None) -> dict[str, Any]:
        """The ID token's claims once every check passes; SignInFailed naming the first that
        fails."""
        raw = token.get("id_token")
        if not isinstance(raw, str):
            raise SignInFailed("the identity provider sent no ID token (scope 'openid')")
        metadata = await self._metadata_doc()
        try:
            decoded = await self._decode(raw, metadata)
            params = {"client_id": self.provider.client_id, "access_token": token["access_token"]}
            if nonce is not None:
                params["nonce"] = nonce
            options = {
                "iss": {"essential": True, "value": metadata["issuer"]},
                "aud": {"essential": True, "value": self.provider.client_id},
            }
            claims = CodeIDToken(decoded.claims, decoded.header, options, params)
            claims.validate(leeway=LEEWAY_S)
        except JoseError as exc:
            log.warning("ID token from %s refused: %r", self.provider.name, exc)
            raise SignInFailed(
                f"the ID token from {self.provider.button_label} failed its {_check_name(exc)} "
                "check; try again, and if it keeps failing tell your administrator"
            ) from exc
        return dict(claims)

    async def _decode(self, raw: str, metadata: dict[str, Any]) -> Any:
        algorithms = metadata.get("id_token_signing_alg_values_supported") or ["RS256"]
        registry = JWSRegistry(algorithms=[a for a in algorithms if a != "none"])
        try:
            return jwt.decode(raw, await self._keys(), registry=registry)
        except InvalidKeyIdError:  # a new signing key: read the JWKS again, once
            return jwt.decode(raw, await self._keys(refetch=True), registry=registry)

    async def _keys(self, refetch: bool = False) -> KeySet:
        if self._jwks is None or refetch:
            uri = (await self._metadata_doc())["jwks_uri"]
            async with self._oauth() as client:
                response = await self._call(client.request("GET", uri, withhold_token=True))
            self._jwks = KeySet.import_key_set(response.json())
        return self._jwks

    async def _metadata_doc(self) -> dict[str, Any]:
        if self._metadata and time.monotonic() - self._metadata_at < METADATA_TTL_S:
            return self._metadata
        async with self._oauth() as client:
            response = await self._call(
                client.request("GET", self.provider.discovery_url, withhold_token=True)
            )
        metadata = response.json() if response.status_code == 200 else {}
        # A document naming another issuer would let that issuer's tokens pass as ours.
        if metadata.get("issuer", "").rstrip("/") != self.provider.issuer.rstrip("/"):
            log.error("%s: discovery gave issuer %r", self.provider.name, metadata.get("issuer"))
            raise ProviderUnavailable(f"{self.provider.button_label} is misconfigured")
        self._metadata, self._metadata_at, self._jwks = metadata, time.monotonic(), None
        return metadata

    def _oauth(self, redirect_uri: str | None = None) -> AsyncOAuth2Client:
        return AsyncOAuth2Client(
            client_id=self.provider.client_id,
            client_secret=self.provider.client_secret,
            scope=self.provider.scopes,
            redirect_uri=redirect_uri,
            code_challenge_method="S256",
            timeout=TIMEOUT_S,
        )

    async def _call(self, call: Any) -> Any:
        """Await one request to the provider: an OAuth error is ProviderRefused; no answer
        (network, timeout, a malformed body) is ProviderUnavailable, logged with the cause."""
        try:
            return await call
        except OAuthError as exc:
            raise ProviderRefused(str(exc.error)) from exc
        except Exception as exc:  # httpx's network errors, JSON errors: the provider failed us
            log.warning("identity provider %s did not answer: %r", self.provider.name, exc)
            raise ProviderUnavailable(
                f"{self.provider.button_label} did not answer; try again shortly"
            ) from exc


def _check_name(exc: JoseError) -> str:
    if isinstance(exc, ExpiredTokenError):
        return "expiry"
    if isinstance(exc, BadSignatureError | InvalidKeyIdError):
        return "signature"
    if isinstance(exc, ClaimError):
        return {"aud": "audience", "iss": "issuer", "azp": "audience"}.get(exc.claim, exc.claim)
    return "format"
