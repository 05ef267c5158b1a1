"""Streaming validation of OpenAI fine-tuning JSONL files, chunk by chunk as they upload.

The API feeds the upload through `JsonlValidator` while writing it to the object store, so
a bad file is refused before it is stored and memory stays bounded by the longest line.
Problems are collected with 1-based line numbers (up to `max_errors`), so the user can fix
a whole file at once instead of one line per upload.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import msgspec

from loraplex.finetune.rows import CheckedRow, Message, Method, RowInvalid, check_row

MAX_ERRORS = 20
SHOWN_IN_MESSAGE = 5
UTF8_BOM = b"\xef\xbb\xbf"
# Without a tokenizer: ~4 characters per token for English, plus the ChatML markers a turn
# adds (<|im_start|>, the role, a newline, <|im_end|>).
CHARS_PER_TOKEN = 4
TOKENS_PER_MESSAGE = 4
# One row is one conversation that must fit the model's context: 128k tokens is ~512 kB of
# text, and JSON's escapes can make that ~6x on the wire. A longer line is refused as it
# arrives, before it is held, decoded (~8x its size in objects) or counted.
MAX_LINE_BYTES = 4 * 1024 * 1024

TokenCounter = Callable[[list[Message]], int]


@dataclass(frozen=True)
class LineError:
    """One problem, at a 1-based line number of the file."""

    line: int
    message: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.message}"


class DatasetRejected(ValueError):
    """The file cannot be trained on; `errors` lists the problems found, by line."""

    def __init__(self, message: str, errors: list[LineError]) -> None:
        super().__init__(message)
        self.message = message
        self.errors = errors

    def __reduce__(self) -> tuple[type[DatasetRejected], tuple[str, list[LineError]]]:
        """Pickle by both arguments: files are checked in worker processes (cpu_pool)."""
        return (type(self), (self.message, self.errors))


@dataclass(frozen=True)
class DatasetStats:
    """What a valid file holds. `tokens` is exact when `tokens_counted`, else an estimate."""

    rows: int
    size_bytes: int
    assistant_turns: int
    tokens: int
    tokens_counted: bool


class JsonlValidator:
    """Validates a JSONL file fed in arbitrary chunks; `finish` returns its stats or raises."""

    def __init__(
        self,
        *,
        purpose_method: Method,
        max_rows: int,
        max_bytes: int,
        max_tokens_per_row: int | None = None,
        count_tokens: TokenCounter | None = None,
        max_errors: int = MAX_ERRORS,
    ) -> None:
        if max_tokens_per_row is not None and count_tokens is None:
            raise ValueError("max_tokens_per_row needs count_tokens to measure rows")
        self._method: Method = purpose_method
        self._max_rows = max_rows
        self._max_bytes = max_bytes
        self._max_tokens_per_row = max_tokens_per_row
        self._count_tokens = count_tokens
        self._max_errors = max_errors
        self._pending = bytearray()
        self._line = 0
        self._size = 0
        self._rows = 0
        self._assistant_turns = 0
        self._tokens = 0
        self._errors: list[LineError] = []
        self._error_count = 0
        self._finished = False

    def feed(self, chunk: bytes) -> None:
        """Check every line completed by `chunk`; raise DatasetRejected on a hard limit."""
        if self._finished:
            raise RuntimeError("feed() after finish()")
        self._size += len(chunk)
        if self._size > self._max_bytes:
            # The line being read when the limit passed; later lines are never parsed.
            limit = f"the file is larger than the {self._max_bytes}-byte limit"
            self._reject_now(self._line + 1, limit)
        start = 0
        while (end := chunk.find(b"\n", start)) != -1:
            self._hold(chunk[start:end])
            self._check_line(bytes(self._pending))
            self._pending.clear()
            start = end + 1
        self._hold(chunk[start:])

    def _hold(self, part: bytes) -> None:
        """Add `part` to the line being read, refusing a line longer than any row can be."""
        if len(self._pending) + len(part) > MAX_LINE_BYTES:
            limit = f"the line is longer than the {MAX_LINE_BYTES}-byte limit for one row"
            self._reject_now(self._line + 1, limit)
        self._pending += part

    def finish(self) -> DatasetStats:
        """Check the last line and return the stats; raise DatasetRejected if any line failed."""
        if self._finished:
            raise RuntimeError("finish() called twice")
        if self._pending:
            self._check_line(bytes(self._pending))
            self._pending.clear()
        self._finished = True
        if self._errors:
            raise DatasetRejected(self._summary(), list(self._errors))
        if self._rows == 0:
            raise DatasetRejected("the file is empty: it has no JSONL rows", [])
        return DatasetStats(
            rows=self._rows,
            size_bytes=self._size,
            assistant_turns=self._assistant_turns,
            tokens=self._tokens,
            tokens_counted=self._count_tokens is not None,
        )

    def _check_line(self, raw: bytes) -> None:
        """Parse and check one line (without its newline)."""
        self._line += 1
        if self._line == 1 and raw.startswith(UTF8_BOM):
            raw = raw[len(UTF8_BOM) :]
        if not raw.strip():
            return  # blank lines, such as a trailing one, are not rows
        self._rows += 1
        if self._rows > self._max_rows:
            self._reject_now(self._line, f"the file has more than the {self._max_rows}-row limit")
        try:
            row = check_row(_parse(raw), self._method)
            self._count(row)
        except RowInvalid as exc:
            self._add_error(str(exc))

    def _count(self, row: CheckedRow) -> None:
        """Add a valid row to the stats, refusing it if it is longer than the context."""
        if self._count_tokens is None:
            self._tokens += sum(_estimate_tokens(c) for c in row.conversations)
        else:
            lengths = [self._count_tokens(c) for c in row.conversations]
            limit = self._max_tokens_per_row
            if limit is not None and max(lengths) > limit:
                raise RowInvalid(
                    f"the row has {max(lengths)} tokens, over the {limit}-token context length"
                )
            self._tokens += sum(lengths)
        self._assistant_turns += row.assistant_turns

    def _add_error(self, message: str) -> None:
        """Record a line's problem; stop reading once `max_errors` are listed."""
        self._error_count += 1
        self._errors.append(LineError(self._line, message))
        if len(self._errors) >= self._max_errors:
            self._finished = True
            raise DatasetRejected(self._summary(stopped=True), list(self._errors))

    def _reject_now(self, line: int, message: str) -> None:
        """A hard limit: stop reading, reporting the limit and any problems seen so far."""
        self._finished = True
        errors = [*self._errors, LineError(line, message)]
        raise DatasetRejected(message, errors[-self._max_errors :])

    def _summary(self, *, stopped: bool = False) -> str:
        """One message naming the first few problems, for APIs that show only a string."""
        shown = "; ".join(str(e) for e in self._errors[:SHOWN_IN_MESSAGE])
        more = len(self._errors) - SHOWN_IN_MESSAGE
        if stopped:
            tail = f"; stopped reading after {len(self._errors)} problems"
        else:
            tail = f"; and {more} more" if more > 0 else ""
        count = self._error_count
        noun = "line" if count == 1 else "lines"
        return f"{count} invalid {noun}: {shown}{tail}"


def validate_jsonl(
    lines: Iterable[bytes],
    *,
    purpose_method: Method,
    max_rows: int,
    max_bytes: int,
    max_tokens_per_row: int | None = None,
    count_tokens: TokenCounter | None = None,
) -> DatasetStats:
    """Validate a whole file given as byte chunks (any split, e.g. a binary file's lines)."""
    validator = JsonlValidator(
        purpose_method=purpose_method,
        max_rows=max_rows,
        max_bytes=max_bytes,
        max_tokens_per_row=max_tokens_per_row,
        count_tokens=count_tokens,
    )
    for chunk in lines:
        validator.feed(chunk)
    return validator.finish()


def _parse(raw: bytes) -> object:
    """Decode one line as UTF-8 JSON, with the reason a user can act on."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RowInvalid(f"not valid UTF-8 (byte {exc.start + 1} of the line)") from None
    try:
        return msgspec.json.decode(text)
    except msgspec.DecodeError as exc:
        raise RowInvalid(f"invalid JSON: {exc}") from None
    except RecursionError:
        raise RowInvalid("invalid JSON: nested too deep") from None


def _estimate_tokens(conversation: list[Message]) -> int:
    """Rough token count of a conversation without a tokenizer."""
    chars = sum(len(m["content"]) for m in conversation)
    return chars // CHARS_PER_TOKEN + TOKENS_PER_MESSAGE * len(conversation)
