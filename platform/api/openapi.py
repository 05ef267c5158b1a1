"""The OpenAPI document (`/schema/openapi.json`): Litestar's, plus what it cannot see.

Routes that read their own body (the `/v1` routes decode it with msgspec, so their 400s name
the parameter the way OpenAI's do; uploads stream multipart to disk) declare it with
`documented(...)`, a Litestar `operation_class` that adds the request body and the 200 answer
to the route's operation without changing how the body is parsed. `LoraplexOpenAPIConfig`
then adds the msgspec Structs those operations name as component schemas, and describes the
error bodies every route really sends (`errors.py`: RFC 9457 problem documents on the control
plane, OpenAI's error object on `/v1`) in place of Litestar's default 400.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, ClassVar

import msgspec
from litestar.openapi.config import OpenAPIConfig
from litestar.openapi.spec import OpenAPI, Operation

from loraplex.api.openapi_links import add_links
from loraplex.api.schemas import Input

SCHEMAS = "#/components/schemas/"
JSON = "application/json"
PROBLEM_JSON = "application/problem+json"
EVENT_STREAM = "text/event-stream"
METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")

# A JSON Schema, or a msgspec Struct whose schema becomes a component named after it.
SchemaSource = dict[str, Any] | type[msgspec.Struct]

OPENAI_ERROR: dict[str, Any] = {
    "title": "OpenAIError",
    "description": "OpenAI's error object, as every /v1 route answers a refusal.",
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["message", "type", "code"],
            "properties": {
                "message": {"type": "string"},
                "type": {"type": "string"},
                "param": {"type": ["string", "null"]},
                "code": {"type": ["string", "null"]},
            },
        }
    },
}
PROBLEM: dict[str, Any] = {
    "title": "Problem",
    "description": "An RFC 9457 problem document, as every control-plane route answers a refusal.",
    "type": "object",
    "required": ["type", "title", "status", "detail"],
    "properties": {
        "type": {"type": "string"},
        "title": {"type": "string"},
        "status": {"type": "integer", "minimum": 400, "maximum": 599},
        "detail": {"type": "string"},
        "param": {"type": "string"},
        "errors": {"type": ["array", "object"]},
    },
}
# A `text/event-stream` answer is described event by event, as schemathesis and OpenAPI 3.2's
# `itemSchema` read it: the JSON payload of each event is in `data`.
SSE_EVENT: dict[str, Any] = {
    "title": "ServerSentEvent",
    "description": "One event; `data` holds a JSON chunk (chat and completions end with [DONE]).",
    "type": "object",
    "required": ["data"],
    "properties": {
        "event": {"type": "string"},
        "data": {"type": "string"},
        "id": {"type": "string"},
    },
}
ERROR_COMPONENTS = {"OpenAIError": OPENAI_ERROR, "Problem": PROBLEM, "ServerSentEvent": SSE_EVENT}
REFUSED = "Refused: the body names the problem (bad input, key, scope, missing object, quota)."
UNAVAILABLE = "A dependency (database, Redis, object store, engine) is not answering; retry."


def ref(name: str) -> dict[str, str]:
    """A reference to the component schema `name`."""
    return {"$ref": SCHEMAS + name}


def schema_of(source: SchemaSource) -> dict[str, Any]:
    """The schema to put in an operation: a reference for a Struct, else the schema itself."""
    return ref(source.__name__) if isinstance(source, type) else source


@dataclass(frozen=True)
class Documented:
    """What a route that reads its own body says about it in the document."""

    body: SchemaSource | None = None
    body_media_type: str = JSON
    ok: SchemaSource | None = None  # the 200 (or the route's success) JSON body
    streams: bool = False  # `stream: true` answers Server-Sent Events instead

    def structs(self) -> list[type[msgspec.Struct]]:
        """The Structs to register as component schemas."""
        return [s for s in (self.body, self.ok) if isinstance(s, type)]


@dataclass
class DocumentedOperation(Operation):
    """An operation that adds `spec`'s body and answer to what Litestar derived."""

    spec: ClassVar[Documented] = Documented()

    def to_schema(self) -> dict[str, Any]:
        """Litestar's operation, with the request body and the success answer described."""
        operation = super().to_schema()
        if self.spec.body is not None:
            operation["requestBody"] = {
                "required": True,
                "content": {self.spec.body_media_type: {"schema": schema_of(self.spec.body)}},
            }
        if self.spec.ok is not None:
            content: dict[str, Any] = {JSON: {"schema": schema_of(self.spec.ok)}}
            if self.spec.streams:
                content[EVENT_STREAM] = {"schema": ref("ServerSentEvent")}
            for status, answer in operation.get("responses", {}).items():
                if status.startswith("2"):
                    answer["content"] = content
        return operation


def documented(
    *,
    body: SchemaSource | None = None,
    body_media_type: str = JSON,
    ok: SchemaSource | None = None,
    streams: bool = False,
) -> type[Operation]:
    """An `operation_class` for a route whose handler reads the body itself."""
    spec = Documented(body, body_media_type, ok, streams)
    return type("DocumentedOperation", (DocumentedOperation,), {"spec": spec})


@dataclass
class LoraplexOpenAPI(OpenAPI):
    """Litestar's document, plus the documented operations' components, the error bodies and
    the links from each created object to the operations that take its id."""

    def to_schema(self) -> dict[str, Any]:
        """The document as JSON, completed."""
        document = super().to_schema()
        schemas = document.setdefault("components", {}).setdefault("schemas", {})
        _add_components(schemas, {**ERROR_COMPONENTS, **self._struct_components()})
        _close_input_schemas(schemas)
        for path, item in document.get("paths", {}).items():
            for method in METHODS:
                if method in item:
                    _describe_errors(path, item[method]["responses"])
        add_links(document.get("paths", {}), METHODS)
        return document

    def _struct_components(self) -> dict[str, Any]:
        structs = {
            struct
            for item in (self.paths or {}).values()
            for method in METHODS
            if isinstance(operation := getattr(item, method, None), DocumentedOperation)
            for struct in operation.spec.structs()
        }
        if not structs:
            return {}
        _, components = msgspec.json.schema_components(
            sorted(structs, key=lambda s: s.__name__), ref_template=SCHEMAS + "{name}"
        )
        return components


def _add_components(schemas: dict[str, Any], extra: dict[str, Any]) -> None:
    for name, schema in extra.items():
        if name in schemas and schemas[name] != schema:
            raise ValueError(f"two different schemas are named {name!r} in the OpenAPI document")
        schemas[name] = schema


def _close_input_schemas(schemas: dict[str, Any]) -> None:
    """Say that request bodies refuse unknown fields, as `Input` does (Litestar's schema for a
    Struct leaves `additionalProperties` open, so clients and fuzzers sent fields that 400)."""
    pending = list(Input.__subclasses__())
    while pending:
        struct = pending.pop()
        pending.extend(struct.__subclasses__())
        component = schemas.get(struct.__name__)
        closed = struct.__struct_config__.forbid_unknown_fields
        if closed and component is not None and component.get("title") == struct.__name__:
            component.setdefault("additionalProperties", False)


def _describe_errors(path: str, responses: dict[str, Any]) -> None:
    """Replace Litestar's default 400 (a shape errors.py never sends) with the real one."""
    if path.startswith("/v1/"):
        error = {"content": {JSON: {"schema": ref("OpenAIError")}}}
    else:
        error = {"content": {PROBLEM_JSON: {"schema": ref("Problem")}}}
    responses.pop("400", None)
    responses["4XX"] = {"description": REFUSED, **error}
    responses["503"] = {
        "description": UNAVAILABLE,
        "headers": {"Retry-After": {"schema": {"type": "integer"}}},
        **error,
    }


@dataclass
class LoraplexOpenAPIConfig(OpenAPIConfig):
    """Litestar's OpenAPI settings, building a `LoraplexOpenAPI` document."""

    def to_openapi_schema(self) -> OpenAPI:
        """The document Litestar fills in, as a `LoraplexOpenAPI`."""
        base = super().to_openapi_schema()
        return LoraplexOpenAPI(**{f.name: getattr(base, f.name) for f in fields(base)})
