"""Every refusal of the validator, through the API: a 4xx naming the problem, nothing stored.

Each case crafts the files a careless or hostile client would send. After the refusal the
adapter has no version and the object store holds nothing for it.
"""

from __future__ import annotations

import io
import json
import tarfile
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from loraplex.api.deps import services_of
from tests.conftest import Api
from tests.support.adapter_api import create_adapter, ensure_tiny_base, upload_files
from tests.support.lora_files import DELETE, lora_tensor_name, lora_tensors, write_adapter

Craft = Callable[[Path], list[Path]]
CONFIG, WEIGHTS = "adapter_config.json", "adapter_model.safetensors"


def _pair(folder: Path) -> list[Path]:
    return [folder / CONFIG, folder / WEIGHTS]


def with_config(**overrides: object) -> Craft:
    return lambda tmp: _pair(write_adapter(tmp / "a", config=overrides))


def with_tensors(change: Callable[[dict[str, np.ndarray]], None], **adapter_kw: object) -> Craft:
    def craft(tmp: Path) -> list[Path]:
        tensors = lora_tensors(rank=int(adapter_kw.get("rank", 4)))
        change(tensors)
        return _pair(write_adapter(tmp / "a", tensors=tensors, **adapter_kw))

    return craft


def pickle_weights(tmp: Path) -> list[Path]:
    folder = write_adapter(tmp / "a")
    (folder / "adapter_model.bin").write_bytes(b"\x80\x04\x95" + b"\x00" * 64)
    return [folder / CONFIG, folder / "adapter_model.bin"]


def extra_file(tmp: Path) -> list[Path]:
    folder = write_adapter(tmp / "a")
    (folder / "train.py").write_text("print('hi')")
    return [*_pair(folder), folder / "train.py"]


def _tar(tmp: Path, add: Callable[[tarfile.TarFile], None]) -> list[Path]:
    folder = write_adapter(tmp / "a")
    archive = tmp / "adapter.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(folder / CONFIG, arcname=CONFIG)
        tar.add(folder / WEIGHTS, arcname=WEIGHTS)
        add(tar)
    return [archive]


def traversal_archive(tmp: Path) -> list[Path]:
    def add(tar: tarfile.TarFile) -> None:
        info = tarfile.TarInfo("../../etc/evil")
        info.size = 4
        tar.addfile(info, io.BytesIO(b"evil"))

    return _tar(tmp, add)


def absolute_path_archive(tmp: Path) -> list[Path]:
    def add(tar: tarfile.TarFile) -> None:
        info = tarfile.TarInfo("/tmp/evil")
        info.size = 4
        tar.addfile(info, io.BytesIO(b"evil"))

    return _tar(tmp, add)


def symlink_archive(tmp: Path) -> list[Path]:
    def add(tar: tarfile.TarFile) -> None:
        info = tarfile.TarInfo("README.md")
        info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
        tar.addfile(info)

    return _tar(tmp, add)


def device_archive(tmp: Path) -> list[Path]:
    def add(tar: tarfile.TarFile) -> None:
        info = tarfile.TarInfo("README.md")
        info.type, info.devmajor, info.devminor = tarfile.CHRTYPE, 1, 3
        tar.addfile(info)

    return _tar(tmp, add)


def zip_bomb(tmp: Path) -> list[Path]:
    folder = write_adapter(tmp / "a")
    archive = tmp / "adapter.zip"
    with zipfile.ZipFile(archive, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.write(folder / CONFIG, CONFIG)
        zf.writestr(WEIGHTS, b"\x00" * (64 * 1024 * 1024))  # 64 MiB of zeros, ~64 KiB packed
    return [archive]


def truncated_weights(tmp: Path) -> list[Path]:
    folder = write_adapter(tmp / "a")
    data = (folder / WEIGHTS).read_bytes()
    (folder / WEIGHTS).write_bytes(data[: len(data) // 2])
    return _pair(folder)


def garbage_weights(tmp: Path) -> list[Path]:
    folder = write_adapter(tmp / "a")
    (folder / WEIGHTS).write_bytes(b"not a safetensors file at all")
    return _pair(folder)


def invalid_json_config(tmp: Path) -> list[Path]:
    folder = write_adapter(tmp / "a")
    (folder / CONFIG).write_text("{ not json")
    return _pair(folder)


def missing_weights(tmp: Path) -> list[Path]:
    return [write_adapter(tmp / "a") / CONFIG]


def _set(name: str, value: np.ndarray) -> Callable[[dict[str, np.ndarray]], None]:
    return lambda tensors: tensors.__setitem__(name, value)


def _with_nan(tensors: dict[str, np.ndarray]) -> None:
    name = lora_tensor_name(0, "q_proj", "A")
    tensors[name] = tensors[name].copy()
    tensors[name][0, 0] = np.nan


def _with_inf(tensors: dict[str, np.ndarray]) -> None:
    name = lora_tensor_name(1, "down_proj", "B")
    tensors[name] = tensors[name].copy()
    tensors[name][0, 0] = np.inf


CASES: dict[str, tuple[Craft, str]] = {
    "pickle .bin weights": (pickle_weights, "pickle_weights"),
    "an extra file": (extra_file, "extra_file"),
    "missing weights file": (missing_weights, "missing_file"),
    "archive with ..": (traversal_archive, "path_traversal"),
    "archive with an absolute path": (absolute_path_archive, "path_traversal"),
    "archive with a symlink": (symlink_archive, "link_in_archive"),
    "archive with a device file": (device_archive, "special_file"),
    "decompression bomb": (zip_bomb, "too_large"),
    "config that is not JSON": (invalid_json_config, "bad_config"),
    "config without r": (with_config(r=DELETE), "bad_config"),
    "config without target_modules": (with_config(target_modules=DELETE), "bad_config"),
    "peft_type IA3": (with_config(peft_type="IA3"), "not_lora"),
    "DoRA": (with_config(use_dora=True), "dora"),
    "modules_to_save": (with_config(modules_to_save=["lm_head"]), "modules_to_save"),
    "target module engines cannot serve": (
        with_config(target_modules=["q_proj", "v_proj", "down_proj", "conv1d"]),
        "unsupported_target",
    ),
    "adapter for a different base model": (
        with_config(base_model_name_or_path="meta-llama/Llama-3-8B"),
        "wrong_base_model",
    ),
    "embedding tensor (added tokens)": (
        with_tensors(
            _set("base_model.model.model.embed_tokens.weight", np.zeros((300, 64), np.float32))
        ),
        "added_tokens",
    ),
    "tensor name not in the base model": (
        with_tensors(
            _set(
                "base_model.model.model.layers.0.self_attn.qq_proj.lora_A.weight",
                np.zeros((4, 64), np.float32),
            )
        ),
        "unknown_tensor",
    ),
    "layer beyond the base model's": (
        with_tensors(_set(lora_tensor_name(7, "q_proj", "A"), np.zeros((4, 64), np.float32))),
        "unknown_tensor",
    ),
    "wrong hidden size": (
        with_tensors(_set(lora_tensor_name(0, "q_proj", "A"), np.zeros((4, 128), np.float32))),
        "shape_mismatch",
    ),
    "A/B rank not r": (
        with_tensors(_set(lora_tensor_name(0, "q_proj", "B"), np.zeros((64, 6), np.float32))),
        "rank_mismatch",
    ),
    "NaN values": (with_tensors(_with_nan), "non_finite"),
    "Inf values": (with_tensors(_with_inf), "non_finite"),
    "truncated safetensors": (truncated_weights, "corrupt_safetensors"),
    "corrupt safetensors": (garbage_weights, "corrupt_safetensors"),
}


@pytest.fixture
async def target(operator: Api, make_tenant):
    tenant = await make_tenant()
    await ensure_tiny_base(operator)
    adapter = await create_adapter(tenant.api, tenant.id)
    return tenant, adapter


async def _assert_nothing_stored(tenant, adapter: str, app) -> None:
    versions = (
        await tenant.api.get(f"/api/v1/tenants/{tenant.id}/adapters/{adapter}/versions")
    ).json()
    assert versions["total"] == 0
    assert services_of(app).store.list_keys(f"adapters/{tenant.id}/") == []


@pytest.mark.parametrize("case", list(CASES))
async def test_refused_upload_names_the_problem_and_stores_nothing(
    case: str, target, tmp_path: Path, app
) -> None:
    craft, code = CASES[case]
    tenant, adapter = target
    response = await upload_files(tenant.api, tenant.id, adapter, craft(tmp_path))
    # Every refusal is a 422 naming its code; only an upload past the size cap is a 413.
    assert response.status_code == (413 if code == "too_large" else 422), response.text
    problem = response.json()
    assert problem["type"].endswith(code), problem
    assert len(problem["detail"]) > 10
    await _assert_nothing_stored(tenant, adapter, app)


async def test_rank_above_the_plan_is_refused(target, tmp_path: Path, app, operator: Api) -> None:
    tenant, adapter = target
    await operator.put(f"/api/v1/tenants/{tenant.id}/quota", json={"overrides": {"max_rank": 8}})
    folder = write_adapter(tmp_path / "a", rank=16)
    response = await upload_files(tenant.api, tenant.id, adapter, _pair(folder))
    assert response.status_code == 422
    assert response.json()["type"].endswith("rank_too_high") and "8" in response.json()["detail"]
    await _assert_nothing_stored(tenant, adapter, app)


async def test_rank_above_the_largest_engine_class_is_refused(
    target, tmp_path: Path, app, settings
) -> None:
    tenant, adapter = target
    folder = write_adapter(tmp_path / "a", rank=settings.max_lora_rank * 2)
    response = await upload_files(tenant.api, tenant.id, adapter, _pair(folder))
    assert response.status_code == 422 and response.json()["type"].endswith("rank_too_high")


async def test_upload_over_the_size_cap_is_a_413(target, tmp_path: Path, app) -> None:
    tenant, adapter = target
    folder = write_adapter(tmp_path / "a")
    big = tmp_path / "adapter_model.safetensors"
    save_file(
        {"x": np.zeros(services_of(app).settings.max_upload_bytes // 4 + 1024, np.float32)},
        str(big),
    )
    response = await upload_files(tenant.api, tenant.id, adapter, [folder / CONFIG, big])
    assert response.status_code == 413
    await _assert_nothing_stored(tenant, adapter, app)


async def test_upload_that_is_not_multipart_is_a_400(target) -> None:
    tenant, adapter = target
    response = await tenant.api.post(
        f"/api/v1/tenants/{tenant.id}/adapters/{adapter}/versions",
        content=json.dumps({"weights": "..."}),
        headers={"content-type": "application/json"},
    )
    assert response.status_code == 400


async def test_malformed_multipart_body_is_a_400_naming_it(target) -> None:
    tenant, adapter = target
    boundary = "849b6d1417c362b039a50112dd4d3ab0"
    response = await tenant.api.post(
        f"/api/v1/tenants/{tenant.id}/adapters/{adapter}/versions",
        content=f"--{boundary}\r\n-3.3e+16--{boundary}--\r\n".encode(),
        headers={"content-type": f"multipart/form-data; boundary={boundary}"},
    )
    assert response.status_code == 400
    assert "malformed" in response.json()["detail"]


async def test_storage_quota_is_enforced(target, tmp_path: Path, operator: Api, app) -> None:
    tenant, adapter = target
    folder = write_adapter(tmp_path / "a")
    size = (folder / WEIGHTS).stat().st_size
    await operator.put(
        f"/api/v1/tenants/{tenant.id}/quota",
        json={"overrides": {"max_storage_bytes": size + size // 2}},
    )
    assert (await upload_files(tenant.api, tenant.id, adapter, _pair(folder))).status_code == 201
    response = await upload_files(
        tenant.api, tenant.id, adapter, _pair(write_adapter(tmp_path / "b"))
    )
    assert response.status_code == 403 and response.json()["type"].endswith("quota_exceeded")


async def test_adapter_count_quota_is_enforced(operator: Api, make_tenant) -> None:
    tenant = await make_tenant()
    await ensure_tiny_base(operator)
    await operator.put(
        f"/api/v1/tenants/{tenant.id}/quota", json={"overrides": {"max_adapters": 2}}
    )
    await create_adapter(tenant.api, tenant.id)
    await create_adapter(tenant.api, tenant.id)
    response = await tenant.api.post(
        f"/api/v1/tenants/{tenant.id}/adapters", json={"name": "third", "base_model": "tiny-llama"}
    )
    assert response.status_code == 403 and "2 adapters" in response.json()["detail"]
