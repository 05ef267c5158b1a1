"""The hostile-tenant suite's figures: what each attack got back, what B and the API felt,
and the table of all cases, printed after the run."""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

import httpx


@dataclass
class Outcome:
    """What the attack got back: each status and the error messages, for the table."""

    statuses: list[int] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)

    def add(self, response: httpx.Response) -> None:
        """Record one response."""
        self.statuses.append(response.status_code)
        if response.status_code >= 400:
            self.messages.append(response.text[:600])


@dataclass(frozen=True)
class Measured:
    """One case's figures."""

    outcome: Outcome
    alone_s: float
    attacked_s: float
    rss_growth: int
    stored_before: int
    stored_after: int
    serves_after: bool


@dataclass(frozen=True)
class Row:
    """One case's line of the table."""

    case: str
    attack_class: str
    statuses: str
    alone_ms: float
    attacked_ms: float
    rss_growth_mib: float
    stored: int
    serves_after: bool

    @classmethod
    def of(cls, case: str, attack_class: str, measured: Measured) -> Row:
        """The row for one measured case."""
        counts = Counter(measured.outcome.statuses)
        statuses = " ".join(f"{s}x{n}" if n > 1 else str(s) for s, n in sorted(counts.items()))
        return cls(
            case,
            attack_class,
            statuses or "-",
            round(measured.alone_s * 1000, 1),
            round(measured.attacked_s * 1000, 1),
            round(measured.rss_growth / 2**20, 1),
            measured.stored_after - measured.stored_before,
            measured.serves_after,
        )


class SuiteReport:
    """Rows in the order the cases ran."""

    def __init__(self) -> None:
        self.rows: list[Row] = []

    def add(self, row: Row) -> None:
        """Add a case's row."""
        self.rows.append(row)

    def table(self) -> str:
        """A Markdown table of every row."""
        head = (
            "| class | case | status | B's longest pause alone / attacked (ms) "
            "| API peak RSS growth (MiB) | stored | serves after |\n|---|---|---|---|---|---|---|"
        )
        lines = [
            f"| {r.attack_class} | {r.case} | {r.statuses} | {r.alone_ms:.0f} / "
            f"{r.attacked_ms:.0f} | {r.rss_growth_mib:.0f} | {r.stored} | "
            f"{'yes' if r.serves_after else 'NO'} |"
            for r in self.rows
        ]
        return "\n".join([head, *lines])

    def as_json(self) -> list[dict[str, Any]]:
        """The rows as plain dicts."""
        return [asdict(r) for r in self.rows]
