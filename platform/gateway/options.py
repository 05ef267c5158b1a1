"""OpenAI's output-shaping fields, checked up front: structured outputs, tools, logprobs.

Each check refuses what an engine would refuse late (mid-request, as a 500, or by ignoring
it) with an OpenAI 400 that names the parameter. What passes is handed to the drivers as
`GenerateOptions`, in OpenAI's own terms.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

import jsonschema_rs
import msgspec

from loraplex.errors import InvalidInput
from loraplex.gateway.schema_limits import check_schema_limits

TOKEN_ID = re.compile(r"^[0-9]{1,9}$")  # ASCII only: `str.isdigit` accepts "²", `int` does not
NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")  # OpenAI's rule for schema and function names
MAX_TOOLS = 128
TOOL_CHOICES = ("none", "auto", "required")
MAX_TOP_LOGPROBS_CHAT = 20  # OpenAI's limit for chat; engines may allow fewer
MAX_LOGPROBS_COMPLETIONS = 5  # OpenAI's limit for the legacy completions `logprobs`
LOGIT_BIAS_RANGE = 100.0


class JsonSchemaFormat(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """`response_format.json_schema`."""

    name: str
    description: str | None = None
    schema: dict[str, Any] | None = None
    strict: bool | None = None


class ResponseFormat(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """`response_format`: plain text, any JSON object, or JSON matching a schema."""

    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None

    def checked(self) -> dict[str, Any] | None:
        """The format to send an engine (None for plain text), or a 400."""
        if self.type == "text":
            return None
        if self.type == "json_object":
            return {"type": "json_object"}
        if self.json_schema is None:
            raise InvalidInput(
                "response_format of type json_schema needs a json_schema object",
                param="response_format.json_schema",
            )
        spec = self.json_schema
        check_name(spec.name, "response_format.json_schema.name")
        schema = spec.schema if spec.schema is not None else {}
        check_json_schema(schema, "response_format.json_schema.schema")
        return {"type": "json_schema", "json_schema": msgspec.to_builtins(spec)}


class FunctionSpec(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """A tool's `function`: its name, what it does, its parameters' JSON Schema."""

    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class Tool(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """One entry of `tools`: only functions exist."""

    type: Literal["function"]
    function: FunctionSpec


class NamedFunction(msgspec.Struct, forbid_unknown_fields=True):
    """`tool_choice.function`: which function must be called."""

    name: str


class NamedToolChoice(msgspec.Struct, forbid_unknown_fields=True):
    """`tool_choice` naming one function."""

    type: Literal["function"]
    function: NamedFunction


def check_name(name: str, param: str) -> None:
    """Refuse a schema or function name OpenAI would refuse."""
    if not NAME.match(name):
        raise InvalidInput(
            f"{param} must be 1 to 64 letters, digits, underscores or dashes", param=param
        )


def check_json_schema(schema: Any, param: str) -> None:
    """Refuse a document that is not a valid JSON Schema (the engine would fail late), or
    one over the limits of `schema_limits` (checked first: they bound the validator too).

    The metaschema check is jsonschema-rs (Rust): ~1 ms for a 1,000-property schema, where
    the pure-Python jsonschema took ~280 ms of the event loop for the same document."""
    if not isinstance(schema, dict):
        raise InvalidInput(f"{param} must be a JSON Schema object", param=param)
    check_schema_limits(schema, param)
    try:
        jsonschema_rs.meta.validate(schema)
    except jsonschema_rs.ValidationError as exc:
        where = "/".join(str(p) for p in exc.instance_path)
        raise InvalidInput(
            f"{param} is not a valid JSON Schema: {exc.message}"
            + (f" (at {where})" if where else ""),
            param=param,
        ) from None
    except jsonschema_rs.ReferencingError as exc:  # an unknown `$schema` dialect
        raise InvalidInput(f"{param} is not a valid JSON Schema: {exc}", param=param) from None


def checked_tools(
    tools: list[Tool] | None, tool_choice: str | NamedToolChoice | None
) -> tuple[list[dict[str, Any]] | None, str | dict[str, Any] | None]:
    """`tools` and `tool_choice` as the engine gets them, or a 400 naming the bad part."""
    if tools is not None and len(tools) > MAX_TOOLS:
        raise InvalidInput(f"tools takes at most {MAX_TOOLS} functions", param="tools")
    names: list[str] = []
    for i, tool in enumerate(tools or []):
        check_name(tool.function.name, f"tools[{i}].function.name")
        if tool.function.parameters is not None:
            check_json_schema(tool.function.parameters, f"tools[{i}].function.parameters")
        if tool.function.name in names:
            raise InvalidInput(
                f"tools[{i}].function.name {tool.function.name!r} is given twice",
                param=f"tools[{i}].function.name",
            )
        names.append(tool.function.name)
    if tool_choice is not None and not tools:
        raise InvalidInput("tool_choice is only allowed when tools are given", param="tool_choice")
    if isinstance(tool_choice, str) and tool_choice not in TOOL_CHOICES:
        raise InvalidInput(
            f"tool_choice must be one of {list(TOOL_CHOICES)} or a named function",
            param="tool_choice",
        )
    if isinstance(tool_choice, NamedToolChoice) and tool_choice.function.name not in names:
        raise InvalidInput(
            f"tool_choice names function {tool_choice.function.name!r}, which is not in tools",
            param="tool_choice.function.name",
        )
    choice = msgspec.to_builtins(tool_choice) if tool_choice is not None else None
    return (msgspec.to_builtins(tools) if tools else None), choice


def chat_schemas(
    response_format: ResponseFormat | None, tools: list[Tool] | None
) -> list[tuple[str, Any]]:
    """Each schema a chat request carries, with the parameter that holds it."""
    spec = response_format.json_schema if response_format is not None else None
    schemas = [("response_format.json_schema.schema", spec.schema if spec else None)]
    schemas += [
        (f"tools[{i}].function.parameters", tool.function.parameters)
        for i, tool in enumerate(tools or [])
    ]
    return [(param, schema) for param, schema in schemas if schema is not None]


def checked_logit_bias(
    bias: dict[str, float] | None, vocab_size: int | None
) -> dict[str, float] | None:
    """`logit_bias` keyed by token ids the model has, each bias within ±100."""
    if not bias:
        return None
    for key, value in bias.items():
        if not TOKEN_ID.match(key) or (vocab_size is not None and int(key) >= vocab_size):
            limit = f" below {vocab_size}" if vocab_size is not None else ""
            raise InvalidInput(
                f"logit_bias keys must be token ids (integers{limit}); got {key!r}",
                param="logit_bias",
            )
        if not -LOGIT_BIAS_RANGE <= value <= LOGIT_BIAS_RANGE:
            raise InvalidInput(
                f"logit_bias values must be between -100 and 100; {key!r} has {value}",
                param="logit_bias",
            )
    return bias


Metadata = Annotated[
    dict[Annotated[str, msgspec.Meta(max_length=64)], Annotated[str, msgspec.Meta(max_length=512)]],
    msgspec.Meta(max_length=16),
]
