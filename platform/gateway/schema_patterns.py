"""What makes a JSON Schema `pattern` too costly for an engine's grammar compiler.

xgrammar turns a pattern into grammar rules and unrolls counted repetitions: with 0.2.7,
`a{1,1000}` takes 58 ms to convert and `a{1,10000}` 6.6 s, quadratic in the count; above
128 (its own unroll threshold) newer versions have crashed the process (xgrammar #863).
Nested quantifiers (`(a+)+`) make an ambiguous grammar whose matcher state grows with the
output; lookarounds and backreferences are not regular and no grammar engine compiles them.

The scan is linear and never runs the pattern. It reads ECMA-262 syntax, which JSON Schema
patterns use: escapes, character classes, groups (capturing, `(?:`, named) and quantifiers.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_PATTERN_CHARS = 512  # real patterns (dates, ids, phone numbers) are under 100
MAX_REPEAT = 128  # xgrammar's unroll threshold for `{n,m}`
COUNTED = re.compile(r"\{(\d{1,9})(,(\d{0,9}))?\}")
LOOKAROUND = ("(?=", "(?!", "(?<=", "(?<!")
CLASS_ESCAPES = frozenset("dDwWsSbBpP")


@dataclass
class _Group:
    """An open group: whether it holds a quantifier, and whether it starts with a literal."""

    quantified_inside: bool = False
    first: str | None = None  # "literal" or "other", set by the group's first atom


@dataclass
class _Atom:
    """The last atom read: what a following quantifier applies to."""

    is_first: bool
    group: _Group | None = None  # the closed group, when the atom is one


def pattern_problem(pattern: str) -> str | None:
    """Why `pattern` is refused, in words; None when it is within the limits."""
    if len(pattern) > MAX_PATTERN_CHARS:
        return f"the pattern has {len(pattern)} characters; at most {MAX_PATTERN_CHARS}"
    for lookaround in LOOKAROUND:
        if lookaround in pattern:
            return "lookarounds ((?=, (?!, (?<=, (?<!) cannot be compiled into a grammar"
    try:
        _scan(pattern)
    except _Refused as exc:
        return str(exc)
    return None


class _Refused(Exception):
    """Raised inside the scan with the reason."""


def _scan(pattern: str) -> None:
    stack = [_Group()]
    atom: _Atom | None = None
    i = 0
    while i < len(pattern):
        char = pattern[i]
        if char == "\\":
            atom, i = _escape(pattern, i, stack[-1])
        elif char == "[":
            atom, i = _begin(stack[-1], "other"), _class_end(pattern, i)
        elif char == "(":
            stack.append(_Group())
            atom, i = None, _group_start(pattern, i)
        elif char == ")" and len(stack) > 1:
            group = stack.pop()
            atom = _begin(stack[-1], group.first or "other")
            atom.group, i = group, i + 1
        elif char in "*+?{":
            atom, i = _quantifier(pattern, i, atom, stack[-1])
        elif char in "^$|":
            atom, i = None, i + 1
        else:
            atom, i = _begin(stack[-1], "other" if char == "." else "literal"), i + 1


def _begin(group: _Group, kind: str) -> _Atom:
    """Note an atom in `group`; the first one decides how the group starts."""
    is_first = group.first is None
    if is_first:
        group.first = kind
    return _Atom(is_first)


def _escape(pattern: str, i: int, group: _Group) -> tuple[_Atom, int]:
    letter = pattern[i + 1] if i + 1 < len(pattern) else ""
    if (letter.isdigit() and letter != "0") or letter == "k":
        raise _Refused("backreferences cannot be compiled into a grammar")
    return _begin(group, "other" if letter in CLASS_ESCAPES else "literal"), i + 2


def _class_end(pattern: str, i: int) -> int:
    """The index after the character class that starts at `i`."""
    j = i + 1
    if j < len(pattern) and pattern[j] == "^":
        j += 1
    if j < len(pattern) and pattern[j] == "]":
        j += 1
    while j < len(pattern) and pattern[j] != "]":
        j += 2 if pattern[j] == "\\" else 1
    return j + 1


def _group_start(pattern: str, i: int) -> int:
    """The index of a group's first atom (after `(`, `(?:` or `(?<name>`)."""
    if pattern.startswith("(?:", i):
        return i + 3
    if pattern.startswith(("(?<", "(?P<"), i):
        end = pattern.find(">", i)
        return end + 1 if end > 0 else len(pattern)
    return i + 1


def _quantifier(
    pattern: str, i: int, atom: _Atom | None, group: _Group
) -> tuple[_Atom | None, int]:
    """Read the quantifier at `i`; refuse a large count or a repeated quantified group."""
    if pattern[i] == "{":
        counted = COUNTED.match(pattern, i)
        if counted is None:  # a literal brace, as ECMA-262 Annex B reads it
            return _begin(group, "literal"), i + 1
        low, has_comma, high = counted.group(1), counted.group(2), counted.group(3)
        bound = max(int(low), int(high) if high else 0)
        if bound > MAX_REPEAT:
            raise _Refused(f"the count {counted.group(0)} is over {MAX_REPEAT}")
        repeats = bool(has_comma and not high) or bound > 1
        end = counted.end()
    else:
        repeats, end = pattern[i] != "?", i + 1
    if end < len(pattern) and pattern[end] in "?+":
        end += 1  # lazy or possessive: the same language
    if atom is None:
        return None, end  # nothing to repeat: the compiler refuses it, costs nothing
    group.quantified_inside = True
    if atom.is_first:
        group.first = "other"
    inner = atom.group
    if repeats and inner is not None and inner.quantified_inside and inner.first != "literal":
        raise _Refused(
            "a repeated group holds a quantifier (like (a+)+) and does not start with a "
            "literal character: nested quantifiers make an ambiguous grammar"
        )
    return None, end
