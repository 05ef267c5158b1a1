"""Single sign-on as the console uses it: begin a sign-in, complete it, renew a session.

Policy (which tenant and role) is `mapping.decide_access`; the provider is spoken to through
`client.OidcClient`; this service does the database side: it creates a user at their first
sign-in, keeps their role in step with their groups, and deactivates a user when their
provider ends their access (the provider refuses to renew, or their groups no longer map to
a role), which also stops their API keys (`auth.authenticator`). Changes are committed here:
a refusal is answered with an error, and what led to it must stay written.

The provider's refresh token stays on the server, sealed in the user's `ExternalIdentity`
row; a browser session keeps only which provider and when it last checked (a cheap "is a
renewal due" test). A due renewal locks the row, and a request that finds it renewed by
another meanwhile takes that result, so a rotating refresh token is never spent twice.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

from redis.asyncio import Redis
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from loraplex.auth.sso.client import OidcClient, ProviderRefused
from loraplex.auth.sso.config import OidcProvider
from loraplex.auth.sso.mapping import (
    Identity,
    SignInFailed,
    SignInRefused,
    decide_access,
    identity_of,
)
from loraplex.auth.sso.pending import PendingSignIn, PendingSignIns
from loraplex.auth.sso.sealing import TokenSeal
from loraplex.control.audit.service import record
from loraplex.db.models import Tenant, TenantStatus, User, UserRole
from loraplex.db.models.sso import ExternalIdentity
from loraplex.errors import LoraplexError, NotFound

log = logging.getLogger("loraplex.sso")
MAX_CODE_CHARS = 2048
ERROR_CODE_CHARS = 64


class AccessEnded(LoraplexError):
    """The session's renewal failed: the user signs in again (or, revoked, cannot)."""

    status_code = 401
    code = "sign_in_required"


@dataclass(frozen=True, slots=True)
class SsoSession:
    """What a browser session signed in through a provider keeps (in its encrypted cookie)."""

    provider: str
    checked_at: float  # wall clock, as the identity row has it: every replica reads both

    def to_dict(self) -> dict[str, Any]:
        """The cookie's form."""
        return {"p": self.provider, "at": self.checked_at}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> SsoSession:
        """Back from the cookie's form."""
        return cls(str(raw.get("p", "")), float(raw.get("at", 0)))


@dataclass(frozen=True, slots=True)
class SignedIn:
    """A completed sign-in: the user and what their session keeps."""

    user: User
    session: SsoSession


class SsoService:
    """The configured identity providers and the sign-ins through them."""

    def __init__(
        self,
        providers: tuple[OidcProvider, ...],
        redis: Redis,
        recheck_s: float,
        secret_key: str,
    ):
        self._clients = {p.name: OidcClient(p) for p in providers}
        self._pending = PendingSignIns(redis)
        self._recheck_s = recheck_s
        self._seal = TokenSeal(secret_key)

    @property
    def providers(self) -> list[OidcProvider]:
        """The providers the sign-in page offers, in configured order."""
        return [c.provider for c in self._clients.values()]

    async def begin(self, name: str, binding: str, redirect_uri: str) -> str:
        """A new sign-in through provider `name`: the URL to send the browser to."""
        client = self._client(name)
        pending = PendingSignIn.new(name, binding, redirect_uri)
        state = await self._pending.put(pending)
        return await client.authorization_url(
            redirect_uri, state, pending.nonce, pending.code_verifier
        )

    async def complete(
        self, db: AsyncSession, name: str, binding: str, query: Mapping[str, str]
    ) -> SignedIn:
        """Finish a sign-in from the provider's callback `query`; the signed-in user."""
        client = self._client(name)
        pending = await self._take_pending(name, binding, query)
        code = query.get("code", "")
        if not 0 < len(code) <= MAX_CODE_CHARS:
            raise SignInFailed("the identity provider's answer has no code; start again")
        try:
            token = await client.exchange(code, pending.code_verifier, pending.redirect_uri)
        except ProviderRefused as exc:
            log.warning("%s refused the code exchange: %s", name, exc.error)
            raise SignInFailed("the identity provider did not accept this sign-in") from exc
        claims = await client.id_token_claims(token, pending.nonce)
        identity = identity_of(client.provider, await self._with_userinfo(client, token, claims))
        user, link = await self._provision(db, client.provider, identity)
        now = datetime.now(UTC)
        self._keep_refresh_token(link, token, now)
        await db.commit()
        return SignedIn(user, SsoSession(name, now.timestamp()))

    async def renew(self, db: AsyncSession, user: User, session: SsoSession) -> SsoSession:
        """`session` as it stands after a renewal when one is due (every `recheck_s`): the
        provider must still vouch for the user, with groups that map to a role."""
        if self._is_fresh(session.checked_at):
            return session
        client = self._clients.get(session.provider)
        link = await self._link_of(db, session.provider, user)  # locked until the commit
        if link.checked_at is not None and self._is_fresh(link.checked_at.timestamp()):
            await db.commit()  # renewed by another request meanwhile
            return SsoSession(session.provider, link.checked_at.timestamp())
        sealed = link.refresh_token_sealed
        refresh_token = self._seal.open(sealed, _bound_to(link)) if sealed else None
        if client is None or refresh_token is None:
            raise AccessEnded("your single sign-on session has ended: sign in again")
        try:
            token = await client.refresh(refresh_token)
            claims = await client.id_token_claims(token, None) if "id_token" in token else {}
            claims = await self._with_userinfo(client, token, claims or {"sub": link.subject})
            identity = identity_of(client.provider, claims)
            if identity.subject != link.subject:
                raise SignInRefused("the identity provider answered for someone else")
            self._apply(user, await self._access(db, client.provider, identity))
        except (ProviderRefused, SignInRefused, SignInFailed) as exc:
            await self._revoke(db, user, link, str(exc))
            raise AccessEnded(
                f"{client.provider.button_label} no longer gives you access to Loraplex"
            ) from exc
        now = datetime.now(UTC)
        self._keep_refresh_token(link, token, now)
        await db.commit()
        return SsoSession(session.provider, now.timestamp())

    def _is_fresh(self, checked_at: float) -> bool:
        return 0 <= time.time() - checked_at < self._recheck_s

    def _keep_refresh_token(
        self, link: ExternalIdentity, token: Mapping[str, Any], now: datetime
    ) -> None:
        """Seal the provider's new refresh token (a provider may keep the old one: then it
        sends none, and the old one stays)."""
        if token.get("refresh_token"):
            link.refresh_token_sealed = self._seal.seal(str(token["refresh_token"]),
                                                        _bound_to(link))  # fmt: skip
        link.checked_at = now

    def _client(self, name: str) -> OidcClient:
        client = self._clients.get(name)
        if client is None:
            raise NotFound(f"no identity provider named '{name[:64]}'")
        return client

    async def _take_pending(
        self, name: str, binding: str, query: Mapping[str, str]
    ) -> PendingSignIn:
        error = query.get("error", "")
        if error:  # the provider's error code is shown only when it is a short plain token
            shown = error if error.isidentifier() and len(error) <= ERROR_CODE_CHARS else "error"
            await self._pending.take(query.get("state", ""))
            raise SignInFailed(f"the identity provider ended the sign-in ({shown}); start again")
        pending = await self._pending.take(query.get("state", ""))
        if pending is None:
            raise SignInFailed("this sign-in link was already used or has expired; start again")
        if pending.provider != name or not binding or pending.binding != binding:
            raise SignInFailed("this sign-in began in another browser; start again here")
        return pending

    @staticmethod
    async def _with_userinfo(
        client: OidcClient, token: Mapping[str, Any], claims: dict[str, Any]
    ) -> dict[str, Any]:
        """The ID token's claims with the userinfo endpoint's (providers put email and
        groups in either); the ID token's subject must match userinfo's."""
        info = await client.userinfo(str(token.get("access_token", "")))
        if info.get("sub") != claims.get("sub"):
            raise SignInFailed("the identity provider's userinfo is for another subject")
        return {**info, **claims}

    async def _provision(
        self, db: AsyncSession, provider: OidcProvider, who: Identity
    ) -> tuple[User, ExternalIdentity]:
        access = await self._access(db, provider, who)
        link = await db.scalar(
            select(ExternalIdentity).where(
                ExternalIdentity.provider == provider.name, ExternalIdentity.subject == who.subject
            )
        )
        if link is None:
            user = await self._user_to_link(db, provider, who, access)
            link = ExternalIdentity(provider=provider.name, subject=who.subject, user_id=user.id)
            db.add(link)
        else:
            user = await db.get_one(User, link.user_id)
            if not user.is_active and not link.disabled_by_provider:
                raise SignInRefused("your Loraplex account is deactivated; ask your administrator")
        link.disabled_by_provider, user.is_active = False, True
        link.last_sign_in_at = datetime.now(UTC)
        self._apply(user, access)
        return user, link

    async def _user_to_link(
        self, db: AsyncSession, provider: OidcProvider, who: Identity, access: ResolvedAccess
    ) -> User:
        """The user this identity signs in as for the first time: a new one, or an existing
        user of the same organisation with the same (provider-verified) email."""
        user = await db.scalar(select(User).where(User.email == who.email))
        if user is not None:
            same_place = user.tenant_id == access.tenant_id and user.role != UserRole.OPERATOR
            if not (who.email_verified and same_place):
                raise SignInRefused(
                    f"a Loraplex account with the email {who.email} already exists and cannot "
                    "be joined to this sign-in; ask your administrator"
                )
            return user
        user = User(email=who.email, name=who.name, role=access.role, tenant_id=access.tenant_id)
        db.add(user)
        await db.flush()
        record(db, f"sso:{provider.name}", "user.create", user, tenant_id=access.tenant_id,
               email=who.email, role=access.role)  # fmt: skip
        return user

    async def _access(
        self, db: AsyncSession, provider: OidcProvider, who: Identity
    ) -> ResolvedAccess:
        access = decide_access(provider, who)
        if access.tenant_slug is None:
            return ResolvedAccess(None, access.role)
        tenant = await db.scalar(select(Tenant).where(Tenant.slug == access.tenant_slug))
        if tenant is None or tenant.status != TenantStatus.ACTIVE:
            log.error("%s maps %s to tenant %r, which is not active", provider.name,
                      who.email, access.tenant_slug)  # fmt: skip
            raise SignInRefused("your organisation is not available in Loraplex; ask your "
                                "administrator")  # fmt: skip
        return ResolvedAccess(tenant.id, access.role)

    @staticmethod
    def _apply(user: User, access: ResolvedAccess) -> None:
        if user.tenant_id != access.tenant_id:
            raise SignInRefused("your account belongs to another organisation in Loraplex")
        user.role = access.role

    async def _link_of(self, db: AsyncSession, provider: str, user: User) -> ExternalIdentity:
        link = await db.scalar(
            select(ExternalIdentity)
            .where(ExternalIdentity.provider == provider, ExternalIdentity.user_id == user.id)
            .with_for_update()
        )
        if link is None:
            raise AccessEnded("your single sign-on session has ended: sign in again")
        return link

    async def _revoke(self, db: AsyncSession, user: User, link: ExternalIdentity, why: str) -> None:
        """The provider ended the user's access: deactivate them and end their sessions."""
        user.is_active = False
        user.session_epoch = (user.session_epoch or 0) + 1
        link.disabled_by_provider = True
        link.refresh_token_sealed = None
        record(db, f"sso:{link.provider}", "user.sso_access_ended", user,
               tenant_id=user.tenant_id, email=user.email, why=why[:200])  # fmt: skip
        await db.commit()
        log.info("%s ended %s's access: %s", link.provider, user.email, why)


@dataclass(frozen=True, slots=True)
class ResolvedAccess:
    """An `Access` with its tenant looked up."""

    tenant_id: UUID | None
    role: UserRole


def _bound_to(link: ExternalIdentity) -> str:
    """What a sealed refresh token is bound to: the identity it belongs to."""
    return f"{link.provider}\0{link.subject}"
