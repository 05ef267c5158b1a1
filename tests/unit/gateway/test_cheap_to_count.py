"""Which prompts are counted on the event loop: only short plain text of a model whose
tokenizer an earlier count has already loaded (loading one takes a while)."""

from __future__ import annotations

from pathlib import Path

from loraplex.gateway.tokens import INLINE_CHARS, cheap_to_count, count_prompt_tokens


def test_a_model_is_counted_in_a_thread_until_its_tokenizer_is_loaded(tmp_path: Path) -> None:
    source = str(tmp_path)
    short = [{"role": "user", "content": "hello"}]
    assert not cheap_to_count(source, messages=short)
    count_prompt_tokens(source, messages=short)
    assert cheap_to_count(source, messages=short)


def test_long_prompts_tools_and_content_parts_go_to_a_thread(tmp_path: Path) -> None:
    source = str(tmp_path)
    count_prompt_tokens(source, prompt="warm")
    assert cheap_to_count(source, prompt="x" * INLINE_CHARS)
    assert not cheap_to_count(source, prompt="x" * (INLINE_CHARS + 1))
    many = [{"role": "user", "content": "x" * (INLINE_CHARS // 2)}] * 3
    assert not cheap_to_count(source, messages=many)
    tool = [{"type": "function", "function": {"name": "f"}}]
    assert not cheap_to_count(source, messages=[{"role": "user", "content": "hi"}], tools=tool)
    parts = [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]
    assert not cheap_to_count(source, messages=parts)
