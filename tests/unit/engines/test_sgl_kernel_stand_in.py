"""The pure-PyTorch `sgl_kernel` stand-in against references computed another way."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from loraplex.serving.engines import sglang_cpu
from loraplex.serving.engines.sglang_cpu import sgl_kernel


def _assign_reference(indices, table, starts, ends, locations):
    """Request by request, slice by slice: the Triton kernel's loop written plainly."""
    expected = table.clone()
    packed = 0
    for row, start, end in zip(indices.tolist(), starts.tolist(), ends.tolist(), strict=True):
        for column in range(start, end):
            expected[row, column] = int(locations[packed])
            packed += 1
    return expected


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_assign_req_to_token_pool_writes_each_requests_packed_slice_into_its_row(data):
    rows, width = 6, 24
    batch = data.draw(st.integers(1, rows))
    indices = torch.tensor(data.draw(st.permutations(range(rows)))[:batch], dtype=torch.int64)
    starts, ends = [], []
    for _ in range(batch):
        start = data.draw(st.integers(0, width))
        starts.append(start)
        ends.append(data.draw(st.integers(start, width)))
    total = sum(e - s for s, e in zip(starts, ends, strict=True))
    locations = torch.randperm(1000)[: total + 3].to(torch.int64)  # longer than needed
    table = torch.full((rows, width), -1, dtype=torch.int32)
    start_t, end_t = torch.tensor(starts), torch.tensor(ends)
    expected = _assign_reference(indices, table, start_t, end_t, locations)

    sgl_kernel.assign_req_to_token_pool_cpu(indices, table, start_t, end_t, locations, width)

    assert torch.equal(table, expected)


def test_copy_all_layer_kv_cache_moves_rows_in_every_buffer_reading_sources_first():
    layers = [torch.randn(10, 4, 3), torch.randn(10, 8, dtype=torch.float64)]
    src = torch.tensor([1, 2, 3, 7])
    tgt = torch.tensor([2, 3, 4, 0])  # overlaps its own sources: a naive loop would smear
    expected = [layer.clone() for layer in layers]
    for layer in expected:
        layer[tgt] = layer[src].clone()
    pointers = torch.tensor([layer.data_ptr() for layer in layers], dtype=torch.uint64)
    strides = torch.tensor([layer[0].numel() * layer.element_size() for layer in layers])

    sgl_kernel.copy_all_layer_kv_cache_cpu(pointers, strides, tgt, src)

    for layer, want in zip(layers, expected, strict=True):
        assert torch.equal(layer, want)


@pytest.mark.parametrize("name", sgl_kernel.SPECULATIVE_ONLY)
def test_speculative_decoding_ops_exist_but_refuse_to_run(name):
    with pytest.raises(NotImplementedError, match="speculative decoding"):
        getattr(sgl_kernel, name)()


def test_nothing_is_registered_under_torch_ops_so_sglang_keeps_its_torch_native_paths():
    assert not hasattr(torch.ops.sgl_kernel, "convert_weight_packed")  # SGLang's AMX probe
    assert not hasattr(torch.ops.sgl_kernel, "rmsnorm_cpu")


def test_the_declared_op_list_is_what_the_module_defines():
    assert all(callable(getattr(sgl_kernel, name)) for name in sglang_cpu.provided_ops())


def _fake_sglang(root: Path, source: str) -> Path:
    (root / "srt").mkdir(parents=True)
    (root / "srt" / "ops.py").write_text(textwrap.dedent(source))
    return root


def test_an_sglang_that_imports_a_new_cpu_op_is_reported_with_its_file(tmp_path):
    root = _fake_sglang(
        tmp_path / "sglang",
        """
        _is_cpu = is_cpu()
        if _is_cpu:
            from sgl_kernel import assign_req_to_token_pool_cpu, fused_new_op_cpu
        """,
    )
    assert sglang_cpu.missing_cpu_ops(root) == {"fused_new_op_cpu": "srt/ops.py"}


def test_imports_off_the_cpu_path_do_not_count(tmp_path):
    root = _fake_sglang(
        tmp_path / "sglang",
        """
        if not (_is_cpu) and _is_cuda:
            from sgl_kernel import rotary_embedding
        elif _is_cpu and _is_cpu_amx_available:
            from sgl_kernel import fused_experts_cpu
        if _is_cuda:
            from sgl_kernel import silu_and_mul
        else:
            from sgl_kernel import gelu_and_mul
        """,
    )
    assert sglang_cpu.missing_cpu_ops(root) == {}


def test_install_puts_the_stand_in_and_a_pth_that_imports_the_fixes(tmp_path):
    sglang_cpu.install_into(tmp_path)
    assert (tmp_path / "sgl_kernel" / "__init__.py").read_text() == (
        sglang_cpu.STAND_IN / "__init__.py"
    ).read_text()
    assert (tmp_path / sglang_cpu.PTH_FILE).read_text() == f"import {sglang_cpu.BOOT_MODULE}\n"
    assert (tmp_path / f"{sglang_cpu.BOOT_MODULE}.py").exists()


def test_engines_installing_side_by_side_all_succeed_and_leave_an_installed_copy_alone(
    tmp_path,
):
    # Engines start side by side (bench adapters): each installs before it launches. One
    # removing the stand-in while another copied it failed a run.
    with ThreadPoolExecutor(max_workers=4) as pool:
        list(pool.map(lambda _: sglang_cpu.install_into(tmp_path), range(8)))
    installed = tmp_path / "sgl_kernel" / "__init__.py"
    before = installed.stat().st_mtime_ns
    sglang_cpu.install_into(tmp_path)  # nothing changed: the running engine's files stay
    assert installed.stat().st_mtime_ns == before
    assert installed.read_text() == (sglang_cpu.STAND_IN / "__init__.py").read_text()


BOOT_CHECK = """
import os, sys
os.environ["SGLANG_USE_CPU_ENGINE"] = "1"
sys.path.insert(0, {folder!r})
import boot  # applies both fixes, as the .pth does in the engine's venv
import torch
assert hasattr(torch.ops.torchvision, "nms") and hasattr(torch.ops.torchvision, "qnms")
t = torch.tensor([1, 2, 3], dtype=torch.int32, device="cpu", pin_memory=True)
e = torch.empty((2, 2), pin_memory=True)
copy = t.pin_memory()
copy[0] = 9
assert t.tolist() == [1, 2, 3] and copy.dtype == t.dtype and copy.device == t.device
print("ok")
"""


def test_boot_fixes_declare_torchvisions_ops_and_make_pinning_a_copy_without_a_device():
    script = BOOT_CHECK.format(folder=str(sglang_cpu.HERE))
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert result.stdout.strip() == "ok", result.stderr
