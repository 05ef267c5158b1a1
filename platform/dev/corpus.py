"""Deterministic text for the dev tokenizer and the chat examples dev adapters are trained on.

Pure Python, no torch: the gateway's tests can ask which answers an adapter was trained on
without loading any ML library.
"""

import random

IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
END_OF_TEXT = "<|endoftext|>"
SPECIAL_TOKENS = (END_OF_TEXT, IM_START, IM_END)

# ChatML, as Qwen and most engines expect it; the generation prompt opens an assistant turn.
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
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
    return lines
