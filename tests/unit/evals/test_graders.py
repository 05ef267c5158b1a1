"""The graders against scores computed by hand."""

from __future__ import annotations

import pytest

from loraplex.evals.graders import grade, json_schema_valid, string_check, text_similarity

CONTEXT = {"item": {"answer": "Paris"}, "sample": {"output_text": "paris, France"}}


@pytest.mark.parametrize(
    ("operation", "value", "reference", "score"),
    [
        ("eq", "Paris", "Paris", 1.0),
        ("eq", "Paris", "paris", 0.0),
        ("ne", "Paris", "Rome", 1.0),
        ("like", "It is Paris.", "Paris", 1.0),
        ("like", "It is paris.", "Paris", 0.0),
        ("ilike", "It is PARIS.", "paris", 1.0),
    ],
)
def test_string_check_operations(operation: str, value: str, reference: str, score: float) -> None:
    assert string_check(operation, value, reference) == score


def test_fuzzy_match_is_the_normalised_indel_ratio() -> None:
    # kitten -> sitting: 13 characters, indel distance 5 (k/s, e/i, +g): 1 - 5/13 = 8/13.
    assert text_similarity("fuzzy_match", "kitten", "sitting") == pytest.approx(8 / 13)


def test_rouge_1_is_the_f_measure_of_shared_unigrams() -> None:
    # 3 shared of 3 predicted (precision 1) and 6 referenced (recall 1/2): F = 2/3.
    score = text_similarity("rouge_1", "the cat sat", "the cat sat on the mat")
    assert score == pytest.approx(2 / 3)


def test_rouge_2_counts_shared_bigrams() -> None:
    # bigrams: "the cat", "cat sat" shared (2 of 2 predicted, 2 of 5 referenced): F = 4/7.
    score = text_similarity("rouge_2", "the cat sat", "the cat sat on the mat")
    assert score == pytest.approx(4 / 7)


def test_rouge_l_is_the_f_measure_of_the_longest_common_subsequence() -> None:
    # LCS "the cat on the mat": 5 of 5 predicted and 5 of 6 referenced words.
    score = text_similarity("rouge_l", "the cat on the mat", "the cat sat on the mat")
    precision, recall = 5 / 5, 5 / 6
    assert score == pytest.approx(2 * precision * recall / (precision + recall))


def test_bleu_is_one_for_an_identical_sentence_and_zero_without_a_shared_word() -> None:
    assert text_similarity("bleu", "the cat sat on the mat", "the cat sat on the mat") == (
        pytest.approx(1.0)
    )
    assert text_similarity("bleu", "dogs run", "the cat sat on the mat") == pytest.approx(0.0)


def test_bleu_of_a_partial_match_is_sacrebleus_sentence_score() -> None:
    # 6 words, 5 matching unigrams, 3/5 bigrams, 2/4 trigrams, 1/3 4-grams; same length:
    # geometric mean of (5/6, 3/5, 2/4, 1/3) = (1/12)^(1/4) ≈ 0.5373.
    score = text_similarity("bleu", "the cat sat on a mat", "the cat sat on the mat")
    assert score == pytest.approx((5 / 6 * 3 / 5 * 2 / 4 * 1 / 3) ** 0.25, abs=1e-4)


def test_json_schema_check_needs_json_that_validates() -> None:
    schema = {"type": "object", "required": ["city"], "properties": {"city": {"type": "string"}}}
    assert json_schema_valid('{"city": "Paris"}', schema) == 1.0
    assert json_schema_valid('{"city": 3}', schema) == 0.0
    assert json_schema_valid("Paris", schema) == 0.0


def test_a_criterion_renders_its_templates_before_grading() -> None:
    criterion = {
        "type": "string_check",
        "name": "city",
        "operation": "ilike",
        "input": "{{sample.output_text}}",
        "reference": "{{ item.answer }}",
    }
    result = grade(criterion, CONTEXT)
    assert (result.score, result.passed) == (1.0, True)


def test_text_similarity_passes_at_its_threshold() -> None:
    criterion = {
        "type": "text_similarity",
        "name": "close",
        "evaluation_metric": "fuzzy_match",
        "input": "{{sample.output_text}}",
        "reference": "{{item.answer}}",
        "pass_threshold": 0.5,
    }
    result = grade(criterion, {"item": {"answer": "kitten"}, "sample": {"output_text": "sitting"}})
    assert result.passed and result.score == pytest.approx(8 / 13)
