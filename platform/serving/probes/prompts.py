"""Which prompts probe a version: from its training file when it came from a fine-tune,
else a small fixed set (pure; the caller reads the file's first bytes)."""

from __future__ import annotations

import json

PROBE_COUNT = 4
MAX_PROMPT_CHARS = 1000  # a probe is a short greedy generation, not a long prefill
TRAINING_HEAD_BYTES = 64 * 1024  # read no further into a training file than this

GENERIC_PROMPTS = (
    "Name the three primary colours.",
    "Write one sentence about the sea.",
    "What is 17 plus 25?",
    "Give a synonym for 'quick'.",
)


def prompts_from_training(head: bytes, count: int = PROBE_COUNT) -> list[str]:
    """The first user message of the first `count` chat rows in a JSONL file's head.

    Rows that do not parse, or are cut by the head's end, are skipped; a file that gives
    fewer than `count` prompts is topped up with the generic ones.
    """
    found: list[str] = []
    for line in head.split(b"\n"):
        if len(found) == count:
            break
        prompt = _first_user_message(line)
        if prompt and prompt not in found:
            found.append(prompt[:MAX_PROMPT_CHARS])
    for generic in GENERIC_PROMPTS:
        if len(found) == count:
            break
        if generic not in found:
            found.append(generic)
    return found


def _first_user_message(line: bytes) -> str | None:
    try:
        row = json.loads(line)
    except ValueError:
        return None
    messages = row.get("messages") if isinstance(row, dict) else None
    if not isinstance(messages, list):  # DPO rows keep theirs under "input"
        source = row.get("input") if isinstance(row, dict) else None
        messages = source.get("messages") if isinstance(source, dict) else None
    for message in messages if isinstance(messages, list) else ():
        if isinstance(message, dict) and message.get("role") == "user":
            content = message.get("content")
            return content if isinstance(content, str) and content.strip() else None
    return None
