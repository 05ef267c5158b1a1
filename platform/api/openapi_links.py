"""OpenAPI `links`: how the id one call returns feeds the next call's path.

A link on an operation's success answer says "take this value from the answer (or from the
request) and pass it as that parameter of that operation" — what a client does after
creating a tenant, an adapter, a file or a job. Schemathesis follows them to fuzz chains of
calls with real ids (`tests/integration/fuzz/test_openapi_stateful.py`), and a reader sees
which id goes where. One table, applied once when the document is built (`openapi.py`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

ID = "$response.body#/id"
NAME = "$response.body#/name"
SAME_TENANT = "$request.path.tenant_id"
SAME_ADAPTER = "$request.path.adapter"


@dataclass(frozen=True)
class Link:
    """From `source`'s success answer to `targets`, with each parameter's runtime expression."""

    source: str  # operationId
    targets: tuple[str, ...]  # operationIds
    parameters: dict[str, str]
    body: dict[str, str] = field(default_factory=dict)  # fields merged into the target's body


IN_TENANT = {"tenant_id": SAME_TENANT}
NEW_ADAPTER = {**IN_TENANT, "adapter": NAME}
NEW_VERSION = {**IN_TENANT, "adapter": SAME_ADAPTER, "number": "$response.body#/number"}
NEW_ALIAS = {**IN_TENANT, "adapter": SAME_ADAPTER, "alias": NAME}

LINKS: tuple[Link, ...] = (
    Link(
        "CreateTenant",
        (
            "GetTenant",
            "UpdateTenant",
            "SuspendTenant",
            "DeleteTenant",
            "GetTenantQuota",
            "SetTenantQuota",
            "CreateApiKey",
            "ListApiKeys",
            "CreateUser",
            "ListUsers",
            "CreateAdapter",
            "ListAdapters",
            "ListTenantAudit",
            "GetTenantUsage",
        ),
        {"tenant_id": ID},
    ),
    Link("SuspendTenant", ("ResumeTenant", "GetTenant"), {"tenant_id": ID}),
    Link("CreateApiKey", ("RevokeApiKey",), {**IN_TENANT, "key_id": ID}),
    Link("CreateUser", ("DeleteUser",), {**IN_TENANT, "user_id": ID}),
    Link(
        "CreateAdapter",
        (
            "GetAdapter",
            "UploadAdapterVersion",
            "ListAdapterVersions",
            "ListAdapterAliases",
            "SetAdapterAlias",
        ),
        NEW_ADAPTER,
    ),
    Link(
        "UploadAdapterVersion",
        ("GetAdapterVersion", "ArchiveAdapterVersion", "DownloadAdapterVersion"),
        NEW_VERSION,
    ),
    Link(
        "UploadAdapterVersion",
        ("SetAdapterAlias", "SetAdapterCanary"),
        {**IN_TENANT, "adapter": SAME_ADAPTER},
        body={"version": "$response.body#/number"},
    ),
    Link(
        "SetAdapterAlias",
        (
            "GetAdapterAlias",
            "PinAdapterAlias",
            "UnpinAdapterAlias",
            "SetAdapterCanary",
            "RollbackAdapterAlias",
            "DeleteAdapterAlias",
        ),
        NEW_ALIAS,
    ),
    Link("RegisterBaseModel", ("GetBaseModel",), {"model_id": ID}),
    Link(
        "RegisterEngine", ("GetEngine", "ListEngineAdapters", "DeregisterEngine"), {"engine_id": ID}
    ),
    Link("MintNodeCredential", ("RevokeNodeCredential",), {"credential_id": ID}),
    Link("CreateFile", ("RetrieveFile", "DeleteFile"), {"file_id": ID}),
    Link("CreateFile", ("CreateFineTuningJob",), {}, body={"training_file": ID}),
    Link(
        "CreateFineTuningJob",
        (
            "RetrieveFineTuningJob",
            "CancelFineTuningJob",
            "ListFineTuningEvents",
            "ListFineTuningCheckpoints",
        ),
        {"job_id": ID},
    ),
)


def add_links(
    paths: dict[str, Any], methods: tuple[str, ...], links: tuple[Link, ...] = LINKS
) -> None:
    """Put each link on its source's success answers; a name no operation has is an error."""
    operations = {
        operation["operationId"]: operation
        for item in paths.values()
        for method in methods
        if (operation := item.get(method)) is not None and "operationId" in operation
    }
    for link in links:
        for name in (link.source, *link.targets):
            if name not in operations:
                raise ValueError(f"an OpenAPI link names {name!r}, which no operation has")
        successes = [
            answer
            for status, answer in operations[link.source]["responses"].items()
            if status.startswith("2")
        ]
        for answer in successes:
            table = answer.setdefault("links", {})
            for target in link.targets:
                if target in table:
                    raise ValueError(f"two OpenAPI links from {link.source!r} to {target!r}")
                table[target] = _link(target, link)


def _link(target: str, link: Link) -> dict[str, Any]:
    described: dict[str, Any] = {"operationId": target}
    if link.parameters:
        described["parameters"] = dict(link.parameters)
    if link.body:
        described["requestBody"] = dict(link.body)
    return described
