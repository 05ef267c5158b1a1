"""What a stream has sent so far, and whether (and how) another engine can continue it exactly.

Pure policy: no I/O. The pump records every chunk of the answer here; when its engine fails
after the first token, `why_not_continued` says whether the answer can go on elsewhere and
`continuation_request` writes the request that does it: the first engine's prompt token ids
followed by the answer's token ids, the remaining `max_tokens`, the same sampling. Token ids,
not text: re-tokenising the text already sent can split it differently (a greedy answer
would then diverge), while the same ids put the next engine in the very state the first
one was in. docs/failover.md says what a client gets in each case.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import msgspec

from loraplex.serving.engines import GenerateChunk, GenerateRequest

# Why a stream was not continued (the `outcome` label of the failover metric, with
# "continued" and "no_engine").
MANY_CHOICES = "many_choices"
PENALTIES = "penalties"
STRUCTURED = "structured_output"
TOOLS = "tools"
STOP_STRINGS = "stop_strings"
CHAT_LOGPROBS = "chat_logprobs"
NO_TOKEN_IDS = "no_token_ids"


@dataclass
class Transcript:
    """The token ids of the prompt and of the answer so far (choice 0).

    An engine may hold back the text of tokens whose ids it already sent (half a character:
    vLLM sends the ids with empty text until the bytes make a character). Their text reaches
    the client only with a later chunk, so a continuation starts after the last token whose
    text was sent (`settled`); the held tokens are generated again, with their text.
    """

    prompt_ids: list[int] | None = None
    output_ids: list[int] = field(default_factory=list)
    settled: int = 0  # output tokens whose text the client has
    # False once a piece of output came without its ids: the answer cannot be rebuilt.
    ids_complete: bool = True

    def record(self, chunk: GenerateChunk) -> None:
        """Take the ids one chunk of the current engine's stream carries."""
        if chunk.prompt_token_ids is not None and self.prompt_ids is None:
            self.prompt_ids = list(chunk.prompt_token_ids)
        if chunk.token_ids is not None:
            self.output_ids.extend(chunk.token_ids)
        elif chunk.text or chunk.tool_calls:
            self.ids_complete = False
        if chunk.text or chunk.tool_calls:
            self.settled = len(self.output_ids)

    @property
    def tokens(self) -> int:
        """Answer tokens the client has the text of: where a continuation starts."""
        return self.settled

    def restart_at_settled(self) -> None:
        """Forget the held-back tokens: the continuation generates them again."""
        del self.output_ids[self.settled :]


def why_not_continued(request: GenerateRequest, transcript: Transcript) -> str | None:
    """None when another engine can continue the answer exactly; else the reason it cannot.
    An engine that gave no ids (or not for every piece) leaves nothing exact to send."""
    refusal = continuable(request)
    if refusal is None and (transcript.prompt_ids is None or not transcript.ids_complete):
        return NO_TOKEN_IDS
    return refusal


def continuable(request: GenerateRequest) -> str | None:
    """None when the request's answer could be continued from token ids; else the reason not.

    Each refusal is a case where continuing from token ids would change the answer, so the
    stream ends as it did before failover existed: penalties count only the continuation's
    own output, a grammar or tool parser would restart mid-structure, a stop string could
    span the cut, n > 1 choices would need every choice's ids, and chat logprobs would come
    back in the completions shape.
    """
    options = request.options
    if request.choices != 1:
        return MANY_CHOICES
    if options is not None:
        if options.presence_penalty or options.frequency_penalty:
            return PENALTIES
        if (options.response_format or {}).get("type", "text") != "text":
            return STRUCTURED
        if options.tools and options.tool_choice != "none":
            return TOOLS
        if options.logprobs and request.is_chat:
            return CHAT_LOGPROBS
    if request.stop:
        return STOP_STRINGS
    return None


def remaining_tokens(request: GenerateRequest, transcript: Transcript, max_context: int) -> int:
    """Tokens the continuation may still generate: what `max_tokens` (or, without one, the
    context) leaves after the prompt and the answer so far."""
    used = len(transcript.prompt_ids or ()) + transcript.tokens
    room = max_context - used
    if request.max_tokens is None:
        return room
    return min(request.max_tokens - transcript.tokens, room)


def continuation_request(
    request: GenerateRequest, transcript: Transcript, max_context: int
) -> GenerateRequest:
    """The request that continues the answer: the prompt's ids and the answer's, the tokens
    left, the same sampling parameters (a seed restarts: a sampled answer goes on with a
    valid sample, not the same one)."""
    assert transcript.prompt_ids is not None
    return msgspec.structs.replace(
        request,
        continue_ids=[*transcript.prompt_ids, *transcript.output_ids[: transcript.settled]],
        max_tokens=remaining_tokens(request, transcript, max_context),
        want_token_ids=True,
    )


def rebased(chunk: GenerateChunk, tokens_before: int) -> GenerateChunk:
    """A continuation's chunk with the counts of the whole answer: its completion tokens
    follow the ones already sent, and its prompt (the continuation's) is not billed again."""
    completion = chunk.completion_tokens
    return msgspec.structs.replace(
        chunk,
        prompt_tokens=None,
        completion_tokens=None if completion is None else completion + tokens_before,
        prompt_token_ids=None,
    )
