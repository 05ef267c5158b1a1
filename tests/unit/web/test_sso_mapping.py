"""Single sign-on policy, pure: how a provider's claims map to a tenant and a role, and which
provider configurations a process refuses to start with."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from loraplex.auth.sso.config import OidcProvider, ProviderConfigError, providers_from_json
from loraplex.auth.sso.mapping import SignInFailed, SignInRefused, decide_access, identity_of
from loraplex.db.models import UserRole

CORP = OidcProvider(
    name="corp",
    issuer="https://id.corp.example",
    client_id="loraplex",
    client_secret="s3cret",
    tenant="corp",
    email_domains={"labs.example": "labs"},
    roles={"admins": "tenant_admin", "users": "tenant_member", "sre": "operator"},
)


def claims(**extra: Any) -> dict[str, Any]:
    return {"sub": "u-1", "email": "Ada@Corp.Example", "email_verified": True, **extra}


def test_the_highest_role_among_the_users_groups_wins() -> None:
    access = decide_access(CORP, identity_of(CORP, claims(groups=["users", "admins", "x"])))
    assert (access.tenant_slug, access.role) == ("corp", UserRole.TENANT_ADMIN)


def test_a_group_mapped_to_operator_gives_no_tenant() -> None:
    access = decide_access(CORP, identity_of(CORP, claims(groups=["users", "sre"])))
    assert (access.tenant_slug, access.role) == (None, UserRole.OPERATOR)


def test_a_user_in_no_mapped_group_is_refused_with_their_groups_named() -> None:
    with pytest.raises(SignInRefused, match="your groups: contractors, temps"):
        decide_access(CORP, identity_of(CORP, claims(groups=["contractors", "temps"])))


def test_a_verified_email_domain_picks_its_tenant() -> None:
    who = identity_of(CORP, claims(email="bo@labs.example", groups=["users"]))
    assert decide_access(CORP, who).tenant_slug == "labs"


def test_an_unverified_email_cannot_pick_a_tenant_by_its_domain() -> None:
    who = identity_of(CORP, claims(email="bo@labs.example", email_verified=False, groups="users"))
    with pytest.raises(SignInRefused, match="not verified your email"):
        decide_access(CORP, who)


def test_without_a_tenant_or_a_matching_domain_the_sign_in_is_refused() -> None:
    provider = OidcProvider(
        name="d", issuer=CORP.issuer, client_id="x", email_domains={"labs.example": "labs"},
        roles={"users": "tenant_member"},
    )  # fmt: skip
    with pytest.raises(SignInRefused, match="no organisation in Loraplex takes sign-ins from"):
        decide_access(provider, identity_of(provider, claims(groups=["users"])))


def test_claims_of_the_wrong_shape_are_a_failed_sign_in() -> None:
    with pytest.raises(SignInFailed, match="no email"):
        identity_of(CORP, {"sub": "u-1"})
    with pytest.raises(SignInFailed, match="not a list of groups"):
        identity_of(CORP, claims(groups=["g"] * 501))


def entry(**extra: Any) -> str:
    base = {"name": "corp", "issuer": "https://id.corp.example", "client_id": "loraplex",
            "tenant": "corp", "roles": {"users": "tenant_member"}}  # fmt: skip
    return json.dumps([{**base, **extra}])


def test_the_client_secret_comes_from_the_environment_or_a_file(tmp_path: Path) -> None:
    from_env = providers_from_json(entry(), {"LORAPLEX_OIDC_SECRET_CORP": "from-env"})
    secret_file = tmp_path / "secret"
    secret_file.write_text("from-file\n")
    from_file = providers_from_json(entry(client_secret_file=str(secret_file)), {})
    assert (from_env[0].client_secret, from_file[0].client_secret) == ("from-env", "from-file")
    assert "from-env" not in repr(from_env)


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"issuer": "http://id.corp.example"}, "https"),
        ({"roles": {"users": "superuser"}}, "unknown role"),
        ({"roles": {}}, "at least one group"),
        ({"scopes": "email"}, "openid"),
        ({"name": "Corp SSO"}, "use a-z"),
        ({"name": "corp\n"}, "use a-z"),
    ],
)
def test_a_provider_an_operator_must_fix_stops_the_process(
    change: dict[str, Any], problem: str
) -> None:
    with pytest.raises(ProviderConfigError, match=problem):
        providers_from_json(entry(**change), {"LORAPLEX_OIDC_SECRET_CORP": "s"})


def test_a_provider_without_a_secret_is_refused() -> None:
    with pytest.raises(ProviderConfigError, match="LORAPLEX_OIDC_SECRET_CORP"):
        providers_from_json(entry(), {})
