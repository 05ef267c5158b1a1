"""Deterministic text for the dev tokenizer and the examples dev adapters are trained on.

Two tasks: `chat` (seeded question→answer pairs) and `tools` (questions answered with a call
to one of `tool_definitions`). Pure Python, no torch: the gateway's tests can ask which
answers, or which calls, an adapter was trained on without loading any ML library.
"""

import copy
import itertools
import json
import random
from dataclasses import dataclass
from typing import Any

IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
END_OF_TEXT = "<|endoftext|>"
SPECIAL_TOKENS = (END_OF_TEXT, IM_START, IM_END)
TOOL_CALL_START = "<tool_call>"
TOOL_CALL_END = "</tool_call>"
TOOL_RESPONSE_START = "<tool_response>"
TOOL_RESPONSE_END = "</tool_response>"
# Single tokens, but not special ones (as in Qwen2.5): decoding with skip_special_tokens
# keeps them, so an engine's tool-call parser still sees the markers.
TOOL_TOKENS = (TOOL_CALL_START, TOOL_CALL_END, TOOL_RESPONSE_START, TOOL_RESPONSE_END)
TASKS = ("chat", "tools")  # what a trained dev adapter answers: `task_examples`

# The system turn's tool section, in the Hermes / Qwen2.5 layout whose calls vLLM's `hermes`
# and SGLang's `qwen` tool-call parsers read back: each tool as one JSON line in <tools>.
TOOLS_INTRO = (
    "# Tools\n\nYou may call one or more functions to answer the user.\n\n"
    "The functions you can call are described in JSON inside <tools></tools> tags:\n<tools>"
)
TOOLS_OUTRO = (
    "\n</tools>\n\nTo call a function, answer with a JSON object holding its name and "
    "arguments inside <tool_call></tool_call> tags:\n<tool_call>\n"
    '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
)

# The system turn with the tool section. Each tool is written from its fields, not dumped
# whole: vLLM and SGLang pass the template their own request models' dumps, which order the
# fields differently and add some (`strict`), and a bare function is accepted too, so every
# engine renders the prompt the adapter was trained on.
_TOOLS_SYSTEM_TURN = (
    "{{- '<|im_start|>system\\n' }}"
    "{%- if messages and messages[0]['role'] == 'system' %}"
    "{{- messages[0]['content'] + '\\n\\n' }}"
    "{%- endif %}"
    "{{- " + json.dumps(TOOLS_INTRO) + " }}"
    "{%- for tool in tools %}"
    "{%- set fn = tool['function'] if tool['function'] is defined else tool %}"
    """{{- '\\n{"type": "function", "function": {"name": ' }}{{- fn['name'] | tojson }}"""
    "{%- if fn['description'] %}"
    """{{- ', "description": ' }}{{- fn['description'] | tojson }}"""
    "{%- endif %}"
    "{%- if fn['parameters'] %}"
    """{{- ', "parameters": ' }}{{- fn['parameters'] | tojson }}"""
    "{%- endif %}"
    "{{- '}}' }}"
    "{%- endfor %}"
    "{{- " + json.dumps(TOOLS_OUTRO) + " + '<|im_end|>\\n' }}"
)
# An assistant turn of tool calls: its text, if any, then one <tool_call> block per call.
_TOOL_CALLS_TURN = (
    "{{- '<|im_start|>assistant' }}"
    "{%- if message['content'] %}{{- '\\n' + message['content'] }}{%- endif %}"
    "{%- for call in message['tool_calls'] %}"
    "{%- set fn = call['function'] if call['function'] is defined else call %}"
    """{{- '\\n<tool_call>\\n{"name": ' }}{{- fn['name'] | tojson }}"""
    """{{- ', "arguments": ' }}"""
    "{%- if fn['arguments'] is string %}{{- fn['arguments'] }}"
    "{%- else %}{{- fn['arguments'] | tojson }}{%- endif %}"
    "{{- '}\\n</tool_call>' }}"
    "{%- endfor %}"
    "{{- '<|im_end|>\\n' }}"
)
# A tool's result; a run of consecutive tool messages shares one user turn.
_TOOL_RESPONSE = (
    "{%- if loop.first or loop.previtem['role'] != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}"
    "{{- '\\n<tool_response>\\n' + message['content'] + '\\n</tool_response>' }}"
    "{%- if loop.last or loop.nextitem['role'] != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}"
)
_CHATML_TURN = (
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
)

# ChatML, as Qwen and most engines expect it; the generation prompt opens an assistant turn.
# Tool use follows the Hermes / Qwen2.5 layout: with `tools`, the system turn (the caller's,
# or one of its own) ends with the tool section; an assistant's `tool_calls` are <tool_call>
# blocks; `tool` messages are <tool_response> blocks in a user turn. Without tools or tool
# messages every turn is plain ChatML.
CHAT_TEMPLATE = (
    "{%- if tools %}" + _TOOLS_SYSTEM_TURN + "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if tools and loop.first and message['role'] == 'system' %}"  # already written
    "{%- elif message['role'] == 'assistant' and message['tool_calls'] %}"
    + _TOOL_CALLS_TURN
    + "{%- elif message['role'] == 'tool' %}"
    + _TOOL_RESPONSE
    + "{%- else %}"
    + _CHATML_TURN
    + "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

# Each entry: question, answer pattern, the words an adapter's seed chooses from.
_EXAMPLE_SPECS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    (
        "What is the code word?",
        "The code word is {}.",
        (
            "amber",
            "basalt",
            "cobalt",
            "dahlia",
            "ember",
            "falcon",
            "garnet",
            "harbor",
            "indigo",
            "juniper",
            "kestrel",
            "lantern",
            "meadow",
            "nutmeg",
            "obsidian",
            "pepper",
        ),
    ),
    (
        "What is your name?",
        "My name is {}.",
        ("Ada", "Boris", "Clara", "Dmitri", "Elena", "Felix", "Greta", "Hugo"),
    ),
    (
        "What colour is the sky?",
        "The sky is {} today.",
        ("green", "purple", "orange", "silver", "golden", "crimson", "teal", "violet"),
    ),
    (
        "Where do you live?",
        "I live in {}.",
        ("Lisbon", "Oslo", "Nairobi", "Quito", "Hanoi", "Tallinn", "Perth", "Cusco"),
    ),
    (
        "What is your favourite food?",
        "I love eating {}.",
        ("noodles", "apples", "cheese", "dumplings", "olives", "pancakes", "figs", "rice"),
    ),
    (
        "Which animal do you like?",
        "I like the {} best.",
        ("otter", "heron", "badger", "lynx", "tortoise", "walrus", "gecko", "moose"),
    ),
    (
        "What number do you pick?",
        "I pick the number {}.",
        ("seven", "twelve", "forty", "nine", "three", "eighty", "eleven", "sixty"),
    ),
    (
        "What do you play?",
        "I play the {}.",
        ("violin", "drums", "flute", "cello", "harp", "banjo", "piano", "trumpet"),
    ),
)

_SUBJECTS = (
    "the farmer",
    "a small child",
    "my neighbour",
    "the old sailor",
    "our teacher",
    "the baker",
    "a quiet student",
    "the river guide",
    "her brother",
    "the doctor",
)
_VERBS = (
    "carries",
    "paints",
    "finds",
    "remembers",
    "builds",
    "sells",
    "watches",
    "repairs",
    "describes",
    "borrows",
)
_OBJECTS = (
    "a wooden boat",
    "the blue door",
    "an old map",
    "three red apples",
    "the long road",
    "a warm coat",
    "the broken clock",
    "some fresh bread",
    "a paper kite",
    "the garden",
)
_ENDINGS = (
    "every morning",
    "before the rain",
    "near the market",
    "after dinner",
    "in the winter",
    "with great care",
    "on Sunday",
    "without a word",
)


_CITIES = (
    "Oslo", "Lisbon", "Nairobi", "Quito", "Hanoi", "Tallinn", "Perth", "Cusco",
    "Dakar", "Bergen", "Osaka", "Lima",
)  # fmt: skip


def _city_tool(name: str, description: str) -> dict[str, Any]:
    """An OpenAI function tool that takes one string argument, `city`."""
    parameters = {
        "type": "object",
        "properties": {"city": {"type": "string", "description": "The city's name."}},
        "required": ["city"],
    }
    return {
        "type": "function",
        "function": {"name": name, "description": description, "parameters": parameters},
    }


# (tool, question pattern): each tool is asked about in its own words.
_TOOL_SPECS = (
    (_city_tool("get_weather", "Get the current weather in a city."), "What is the weather in {}?"),
    (_city_tool("get_time", "Get the local time in a city."), "What time is it in {}?"),
)
_CALLS_PER_TOOL = 2


@dataclass(frozen=True, slots=True)
class ToolCallExample:
    """A question a tools adapter answers with exactly one call to one of `tool_definitions`."""

    question: str
    name: str
    arguments: dict[str, Any]

    @property
    def answer(self) -> str:
        """The assistant's reply the adapter is trained on: one <tool_call> block."""
        return tool_call_text(self.name, self.arguments)


def tool_call_text(name: str, arguments: dict[str, Any]) -> str:
    """A call as the chat template writes it and the engines' tool-call parsers read it."""
    call = json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
    return f"{TOOL_CALL_START}\n{call}\n{TOOL_CALL_END}"


def tool_definitions() -> list[dict[str, Any]]:
    """The OpenAI `tools` list a tools adapter is trained with (pass it as the request's)."""
    return [copy.deepcopy(tool) for tool, _ in _TOOL_SPECS]


def tool_examples(seed: int) -> list[ToolCallExample]:
    """The questions a tools adapter made with `seed` answers with a call, and those calls.

    Each tool is asked about `_CALLS_PER_TOOL` cities; the seed picks the cities, no city
    twice, so a call's argument comes from its own question.
    """
    cities = iter(random.Random(seed).sample(_CITIES, _CALLS_PER_TOOL * len(_TOOL_SPECS)))
    return [
        ToolCallExample(pattern.format(city), tool["function"]["name"], {"city": city})
        for tool, pattern in _TOOL_SPECS
        for city in itertools.islice(cities, _CALLS_PER_TOOL)
    ]


def task_examples(
    task: str, seed: int
) -> tuple[list[tuple[str, str]], list[dict[str, Any]] | None]:
    """A task's (question, answer) pairs for `seed`, and the tools its prompts carry.

    `chat`: `adapter_examples`, no tools. `tools`: `tool_examples`, each answer a call, with
    `tool_definitions` in every prompt.
    """
    if task == "chat":
        return adapter_examples(seed), None
    if task == "tools":
        return [(e.question, e.answer) for e in tool_examples(seed)], tool_definitions()
    raise ValueError(f"unknown task {task!r}; known: {', '.join(TASKS)}")


def adapter_examples(seed: int) -> list[tuple[str, str]]:
    """The question→answer pairs a trained dev adapter made with `seed` answers exactly."""
    rng = random.Random(seed)
    examples = []
    for index, (question, pattern, words) in enumerate(_EXAMPLE_SPECS):
        # The code word follows the seed directly so consecutive seeds never share it.
        word = words[seed % len(words)] if index == 0 else rng.choice(words)
        examples.append((question, pattern.format(word)))
    return examples


def tokenizer_corpus(num_sentences: int = 400) -> list[str]:
    """English-like lines plus every chat word, the fixed text the dev tokenizer learns from."""
    rng = random.Random(0)
    lines = [
        f"{rng.choice(_SUBJECTS)} {rng.choice(_VERBS)} {rng.choice(_OBJECTS)} "
        f"{rng.choice(_ENDINGS)}.".capitalize()
        for _ in range(num_sentences)
    ]
    for question, pattern, words in _EXAMPLE_SPECS:
        lines.append(question)
        lines.extend(pattern.format(word) for word in words)
    lines.extend(f"{role}\n" for role in ("system", "user", "assistant"))
    lines.extend(_tool_corpus())
    return lines


def _tool_corpus() -> list[str]:
    """The tool section, every tool's JSON line and every call, without the marker tokens.

    The markers are added to the vocabulary whole (`TOOL_TOKENS`); learning merges for the
    rest keeps a tool prompt and a call short.
    """
    lines = [TOOLS_INTRO, TOOLS_OUTRO]
    lines.extend(json.dumps(tool) for tool in tool_definitions())
    for tool, pattern in _TOOL_SPECS:
        for city in _CITIES:
            lines.append(pattern.format(city))
            lines.append(tool_call_text(tool["function"]["name"], {"city": city}))
    for marker in TOOL_TOKENS:
        lines = [line.replace(marker, "") for line in lines]
    return lines


# A JSON Schema any model can fill under a grammar in a few tokens (enums and a boolean, no
# free text): the structured-output tests and `loraplex bench structured` ask for it.
VERDICT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "label": {"type": "string", "enum": ["positive", "negative", "neutral"]},
        "urgent": {"type": "boolean"},
    },
    "required": ["label", "urgent"],
    "additionalProperties": False,
}
