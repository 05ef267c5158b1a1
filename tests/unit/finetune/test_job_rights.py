"""The job-rights rule: a key without `admin` trains new adapters only and moves no alias."""

from __future__ import annotations

from uuid import UUID

from loraplex.auth.principal import Principal, Scope
from loraplex.finetune.permissions import LEAST, TENANT_ADMIN, JobRights, refusal


def rights(*scopes: str) -> JobRights:
    """The rights of a tenant key holding `scopes`."""
    return JobRights.of_key(Principal(UUID(int=1), "k", UUID(int=2), frozenset(scopes)))


def test_a_fine_tune_key_may_train_a_new_adapter_without_an_alias() -> None:
    assert refusal(rights(Scope.FINE_TUNE), "new-one", False, None) is None


def test_a_fine_tune_key_may_not_add_to_an_existing_adapter() -> None:
    refused = refusal(rights(Scope.FINE_TUNE), "prodbot", True, None)
    assert refused is not None and refused.status_code == 403 and refused.param == "suffix"
    assert "'prodbot'" in refused.detail and "'admin'" in refused.detail


def test_a_fine_tune_key_may_not_move_an_alias_even_of_a_new_adapter() -> None:
    refused = refusal(rights(Scope.FINE_TUNE), "new-one", False, "prod")
    assert refused is not None and refused.param == "alias" and "'prod'" in refused.detail


def test_admin_and_operator_keys_may_do_both() -> None:
    assert refusal(rights(Scope.ADMIN, Scope.FINE_TUNE), "prodbot", True, "prod") is None
    operator = JobRights.of_key(Principal(UUID(int=1), "k", None, frozenset({Scope.OPERATOR})))
    assert refusal(operator, "prodbot", True, "prod") is None
    assert refusal(TENANT_ADMIN, "prodbot", True, "prod") is None


def test_the_default_is_the_least() -> None:
    assert refusal(LEAST, "prodbot", True, None) is not None
    assert refusal(LEAST, "new-one", False, "prod") is not None
