"""An upload that stalls or trickles is refused (408) instead of holding its place for ever
(`loraplex.api.multipart.moving_chunks`); one of many parts is refused at the first part
past the cap, before the parser's callbacks run for the rest."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from python_multipart import MultipartParser

from loraplex.api import multipart
from loraplex.api.multipart import MAX_PARTS, UploadTooSlow, moving_chunks
from loraplex.errors import InvalidInput


async def _trickle(chunks: int, size: int, gap_s: float) -> AsyncIterator[bytes]:
    for _ in range(chunks):
        await asyncio.sleep(gap_s)
        yield b"x" * size


async def _take(chunks: AsyncIterator[bytes]) -> int:
    return sum([len(c) async for c in moving_chunks(chunks)])


async def test_a_steady_upload_passes_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(multipart, "UPLOAD_IDLE_S", 0.5)
    monkeypatch.setattr(multipart, "UPLOAD_GRACE_S", 0.05)
    monkeypatch.setattr(multipart, "UPLOAD_MIN_RATE", 1000)
    assert await _take(_trickle(20, 1000, 0.01)) == 20_000  # ~100 kB/s


async def test_an_upload_that_stops_sending_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(multipart, "UPLOAD_IDLE_S", 0.1)
    with pytest.raises(UploadTooSlow, match="no byte") as refused:
        await _take(_trickle(2, 10, 1.0))
    assert refused.value.status_code == 408


async def test_an_upload_trickling_past_the_grace_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(multipart, "UPLOAD_IDLE_S", 1.0)
    monkeypatch.setattr(multipart, "UPLOAD_GRACE_S", 0.1)
    monkeypatch.setattr(multipart, "UPLOAD_MIN_RATE", 10_000)
    with pytest.raises(UploadTooSlow, match="bytes/s"):
        await _take(_trickle(1000, 16, 0.01))  # ~1.6 kB/s, each chunk well within the idle limit


async def test_a_fast_upload_within_the_grace_is_never_timed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(multipart, "UPLOAD_GRACE_S", 60.0)
    monkeypatch.setattr(multipart, "UPLOAD_MIN_RATE", 10**9)
    assert await _take(_trickle(5, 16, 0.0)) == 80


def test_a_body_of_many_parts_is_refused_past_the_cap(tmp_path: Path) -> None:
    field = b'--x\r\nContent-Disposition: form-data; name="f"\r\n\r\n\r\n'
    writer = multipart._PartWriter(tmp_path, 10**6)
    parser = MultipartParser(b"x", writer.callbacks())
    parser.write(field * MAX_PARTS)  # as many as an upload may have: taken
    with pytest.raises(InvalidInput, match=f"more than {MAX_PARTS} parts"):
        parser.write(field * 10_000)
    assert writer.fields == {"f": ""}
