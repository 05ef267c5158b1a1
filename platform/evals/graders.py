"""The graders: pure functions of a rendered input and reference, returning a score.

`string_check` and `text_similarity` are OpenAI's (same names, operations and metrics);
`loraplex_json_schema` is Loraplex's own: 1 when the input parses as JSON and validates
against the criterion's schema. Scores lie in [0, 1]; a criterion passes at
`score >= pass_threshold` (string and schema checks: score 1).

The similarity metrics come from their reference libraries: rapidfuzz (fuzzy_match, its
normalised Indel ratio), sacrebleu (sentence BLEU with its default smoothing) and Google's
rouge-score (ROUGE-N and ROUGE-L F-measure).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from typing import Any

from loraplex.evals.templates import render

SIMILARITY_METRICS = (
    "fuzzy_match",
    "bleu",
    "rouge_1",
    "rouge_2",
    "rouge_3",
    "rouge_4",
    "rouge_5",
    "rouge_l",
)
STRING_OPERATIONS = ("eq", "ne", "like", "ilike")
JSON_SCHEMA = "loraplex_json_schema"


@dataclass(frozen=True, slots=True)
class Grade:
    """One criterion's verdict on one item."""

    name: str
    type: str
    score: float
    passed: bool

    def as_result(self) -> dict[str, Any]:
        """OpenAI's output-item result."""
        return {"name": self.name, "type": self.type, "score": self.score, "passed": self.passed}


def string_check(operation: str, value: str, reference: str) -> float:
    """1.0 when `value` stands in `operation` to `reference`; like/ilike mean "contains"."""
    match operation:
        case "eq":
            hit = value == reference
        case "ne":
            hit = value != reference
        case "like":
            hit = reference in value
        case "ilike":
            hit = reference.lower() in value.lower()
        case _:
            raise ValueError(f"unknown string_check operation {operation!r}")
    return 1.0 if hit else 0.0


def text_similarity(metric: str, value: str, reference: str) -> float:
    """The similarity of `value` to `reference` under `metric`, in [0, 1]."""
    if metric == "fuzzy_match":
        from rapidfuzz import fuzz

        return float(fuzz.ratio(value, reference)) / 100.0
    if metric == "bleu":
        import sacrebleu

        return min(1.0, float(sacrebleu.sentence_bleu(value, [reference]).score) / 100.0)
    if metric.startswith("rouge_"):
        name = "rougeL" if metric == "rouge_l" else f"rouge{metric.removeprefix('rouge_')}"
        return float(_rouge(name).score(reference, value)[name].fmeasure)
    raise ValueError(f"unknown text_similarity metric {metric!r}")


@cache
def _rouge(name: str) -> Any:
    from rouge_score import rouge_scorer

    return rouge_scorer.RougeScorer([name], use_stemmer=False)


def json_schema_valid(value: str, schema: dict[str, Any]) -> float:
    """1.0 when `value` is JSON that validates against `schema` (checked when the eval was
    created: a valid JSON Schema within the gateway's schema limits)."""
    try:
        document = json.loads(value)
    except ValueError:
        return 0.0
    return 1.0 if _validator(json.dumps(schema, sort_keys=True)).is_valid(document) else 0.0


@cache
def _validator(schema_text: str) -> Any:
    import jsonschema_rs

    return jsonschema_rs.validator_for(json.loads(schema_text))


def grade(criterion: dict[str, Any], context: dict[str, Any]) -> Grade:
    """One criterion (as stored on the eval) applied to one item and its sample."""
    kind, name = criterion["type"], criterion["name"]
    value = render(criterion["input"], context)
    if kind == "string_check":
        score = string_check(criterion["operation"], value, render(criterion["reference"], context))
        return Grade(name, kind, score, score == 1.0)
    if kind == "text_similarity":
        reference = render(criterion["reference"], context)
        score = text_similarity(criterion["evaluation_metric"], value, reference)
        return Grade(name, kind, score, score >= criterion["pass_threshold"])
    if kind == JSON_SCHEMA:
        score = json_schema_valid(value, criterion["schema"])
        return Grade(name, kind, score, score == 1.0)
    raise ValueError(f"unknown grader type {kind!r}")
