"""Bounds on tenant files, checked before the costly step: each hostile file is refused
quickly, by name, without the archive library or the JSON decoder seeing the bulk of it."""

from __future__ import annotations

import io
import json
import pickle
import struct
import tarfile
import time
from pathlib import Path

import pytest

from loraplex.adapters import AdapterRejected, Rejection, ValidationLimits, validate_adapter_dir
from loraplex.adapters.archive_scan import check_tar_headers, check_zip_directory
from loraplex.adapters.safetensors_header import HeaderError, read_header
from tests.security import hostile
from tests.support.lora_files import TINY_BASE

LIMITS = ValidationLimits(max_rank=64, max_bytes=16 * 2**20)


def weights(tmp_path: Path, header: dict | bytes) -> Path:
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    path = tmp_path / "adapter_model.safetensors"
    path.write_bytes(struct.pack("<Q", len(raw)) + raw)
    return path


def header_error(path: Path) -> str:
    with pytest.raises(HeaderError) as caught:
        read_header(path)
    return str(caught.value)


def test_big_integer_dimensions_are_refused_before_they_are_multiplied(tmp_path):
    folder = tmp_path / "a"
    hostile.big_integer_dimensions(folder)
    started = time.process_time()
    assert "dimensions" in header_error(folder / "adapter_model.safetensors")
    assert time.process_time() - started < 1.0  # unbounded, math.prod took seconds


def test_one_huge_dimension_is_refused(tmp_path):
    spec = {"dtype": "F32", "shape": [2**40, 2], "data_offsets": [0, 0]}
    assert "dimension above" in header_error(weights(tmp_path, {"t": spec}))


def test_a_header_larger_than_any_adapters_is_refused_before_it_is_read(tmp_path):
    path = tmp_path / "adapter_model.safetensors"
    path.write_bytes(struct.pack("<Q", 50 * 2**20) + b"{" + bytes(10))
    assert "at most" in header_error(path)


def test_more_tensors_than_any_adapter_has_are_refused(tmp_path):
    specs = {f"t{i}": {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]} for i in range(9000)}
    assert "tensors" in header_error(weights(tmp_path, specs))


def test_a_header_nested_too_deep_is_refused_not_crashed_on(tmp_path):
    assert "nested too deep" in header_error(weights(tmp_path, b"[" * 200_000 + b"]" * 200_000))


def test_a_config_nested_too_deep_is_a_bad_config(tmp_path):
    folder = tmp_path / "a"
    hostile.deep_config(folder)
    with pytest.raises(AdapterRejected) as caught:
        validate_adapter_dir(folder, TINY_BASE, LIMITS)
    assert caught.value.code == Rejection.BAD_CONFIG


def test_a_zip_declaring_many_entries_is_refused_from_its_end_record(tmp_path):
    (archive,) = hostile.zip_with_many_entries(tmp_path, count=100_000)
    with pytest.raises(AdapterRejected) as caught:
        check_zip_directory(archive)
    assert caught.value.code == Rejection.EXTRA_FILE


def test_a_tar_with_many_entries_is_refused_from_its_headers(tmp_path):
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w") as tar:
        for i in range(40):
            tar.addfile(tarfile.TarInfo(f"f{i}"), io.BytesIO(b""))
    data.seek(0)
    with pytest.raises(AdapterRejected) as caught:
        check_tar_headers(data)
    assert caught.value.code == Rejection.EXTRA_FILE


def test_refusals_survive_the_trip_from_a_worker_process():
    refused = AdapterRejected(Rejection.TOO_LARGE, "over the limit")
    copy = pickle.loads(pickle.dumps(refused))
    assert (copy.code, copy.message) == (Rejection.TOO_LARGE, "over the limit")
