"""The request bodies of /v1/evals and its runs (OpenAI's shapes), with Loraplex's bounds.

Everything here is tenant input: counts, string lengths and numbers are bounded by the
types, so a body that decodes is already small; item schemas and item depth are checked by
`loraplex.evals.checks` before anything is stored.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

MAX_CRITERIA = 16
MAX_ITEMS = 1000  # per run: inline items or lines of a file
MAX_TEMPLATE_MESSAGES = 32
MAX_TEXT = 32 * 1024  # one template string
MAX_EVAL_BODY = 256 * 1024
MAX_RUN_BODY = 4 * 1024 * 1024

Name = Annotated[str, msgspec.Meta(min_length=1, max_length=200)]
Text = Annotated[str, msgspec.Meta(max_length=MAX_TEXT)]
Metadata = Annotated[
    dict[Annotated[str, msgspec.Meta(max_length=64)], Annotated[str, msgspec.Meta(max_length=512)]],
    msgspec.Meta(max_length=16),
]
Unit = Annotated[float, msgspec.Meta(ge=0, le=1)]


class CustomConfig(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """`data_source_config` of type `custom`: the JSON schema every item must match."""

    type: Literal["custom"]
    item_schema: dict[str, Any]
    include_sample_schema: bool = False


class StringCheck(msgspec.Struct, tag="string_check", tag_field="type", forbid_unknown_fields=True):
    """OpenAI's string_check grader."""

    name: Name
    input: Text
    reference: Text
    operation: Literal["eq", "ne", "like", "ilike"]


SimilarityMetric = Literal[
    "fuzzy_match", "bleu", "rouge_1", "rouge_2", "rouge_3", "rouge_4", "rouge_5", "rouge_l"
]


class TextSimilarity(
    msgspec.Struct, tag="text_similarity", tag_field="type", forbid_unknown_fields=True
):
    """OpenAI's text_similarity grader (the metrics a library computes here)."""

    name: Name
    input: Text
    reference: Text
    evaluation_metric: SimilarityMetric
    pass_threshold: Unit


class JsonSchemaCheck(
    msgspec.Struct, tag="loraplex_json_schema", tag_field="type", forbid_unknown_fields=True
):
    """Loraplex's grader: the input is JSON valid against `schema`."""

    name: Name
    input: Text
    schema: dict[str, Any]


Criterion = StringCheck | TextSimilarity | JsonSchemaCheck


class EvalCreate(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """POST /v1/evals."""

    data_source_config: CustomConfig
    testing_criteria: Annotated[
        list[Criterion], msgspec.Meta(min_length=1, max_length=MAX_CRITERIA)
    ]
    name: Name | None = None
    metadata: Metadata | None = None


class Row(msgspec.Struct, forbid_unknown_fields=True):
    """One inline item: `{"item": {...}}` (a given `sample` is ignored: the run samples)."""

    item: dict[str, Any]
    sample: dict[str, Any] | None = None


class FileContent(msgspec.Struct, tag="file_content", tag_field="type", forbid_unknown_fields=True):
    """Items sent inline."""

    content: Annotated[list[Row], msgspec.Meta(min_length=1, max_length=MAX_ITEMS)]


class FileId(msgspec.Struct, tag="file_id", tag_field="type", forbid_unknown_fields=True):
    """Items in a JSONL file uploaded with purpose `evals`."""

    id: Annotated[str, msgspec.Meta(max_length=100)]


class Message(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """One template message; its content may hold `{{item.x}}` references."""

    role: Literal["system", "developer", "user", "assistant"]
    content: Text
    type: Literal["message"] | None = None


class Template(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """`input_messages` of type `template`."""

    type: Literal["template"]
    template: Annotated[list[Message], msgspec.Meta(min_length=1, max_length=MAX_TEMPLATE_MESSAGES)]


class SamplingParams(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """The sampling parameters every item is generated with."""

    temperature: Annotated[float, msgspec.Meta(ge=0, le=2)] | None = None
    top_p: Unit | None = None
    max_completion_tokens: Annotated[int, msgspec.Meta(ge=1, le=4096)] | None = None
    seed: Annotated[int, msgspec.Meta(ge=0, le=2**31 - 1)] | None = None


class Completions(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """A run's data source of type `completions`: the model answers each item."""

    type: Literal["completions"]
    source: FileContent | FileId
    input_messages: Template
    model: Annotated[str, msgspec.Meta(min_length=1, max_length=200)]
    sampling_params: SamplingParams | None = None


class RunCreate(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """POST /v1/evals/{eval_id}/runs."""

    data_source: Completions
    name: Name | None = None
    metadata: Metadata | None = None


class GateDataSource(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """A run's `completions` data source without its model (the gate fills that in)."""

    type: Literal["completions"] = "completions"
    source: FileContent | FileId
    input_messages: Template
    sampling_params: SamplingParams | None = None


class EvalGate(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """`eval_gate` of POST /v1/fine_tuning/jobs (a Loraplex extension)."""

    eval_id: Annotated[str, msgspec.Meta(max_length=100)]
    threshold: Unit
    data_source: GateDataSource
    baseline: Annotated[str, msgspec.Meta(min_length=1, max_length=200)] | None = None
    margin: Unit = 0.0
