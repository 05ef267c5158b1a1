"""The seeded chat examples and the tokenizer's corpus."""

from loraplex.dev.corpus import adapter_examples, tokenizer_corpus


def test_the_same_seed_gives_the_same_examples() -> None:
    assert adapter_examples(5) == adapter_examples(5)


def test_consecutive_seeds_have_different_code_words() -> None:
    code_words = {adapter_examples(seed)[0][1] for seed in range(8)}
    assert len(code_words) == 8


def test_examples_ask_distinct_questions() -> None:
    questions = [question for question, _ in adapter_examples(0)]
    assert len(set(questions)) == len(questions) == 8


def test_tokenizer_corpus_contains_every_example_answer() -> None:
    corpus = set(tokenizer_corpus())
    assert all(answer in corpus for _, answer in adapter_examples(11))
