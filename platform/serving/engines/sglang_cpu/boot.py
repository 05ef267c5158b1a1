"""Import-time fixes for SGLang on a machine without an accelerator (sglang 0.5.23).

The launcher copies this file into the SGLang engine's virtual environment as
`loraplex_sglang_cpu_boot.py` with a `.pth` line that imports it, so SGLang's scheduler and
detokenizer subprocesses (separate interpreters) get the fixes too. It does nothing unless
`SGLANG_USE_CPU_ENGINE=1`, the variable that also switches SGLang to its CPU path.

1. PyPI's torchvision is a CUDA build: its compiled ops fail to load without
   `libtorch_cuda.so`, which torchvision tolerates, except that `_meta_registrations`
   calls `register_fake("torchvision::nms")` and `("torchvision::qnms")` unconditionally
   and fails on operators that do not exist. Declaring the two schemas (no kernel) first is
   enough: a text model never calls them.
2. SGLang's LoRA layers ask for pinned host memory (`pin_memory=True`, `.pin_memory()`),
   which torch refuses when no accelerator exists. Pinning only page-locks memory for
   faster host-to-device copies, so without a device the flag is dropped and
   `.pin_memory()` returns a plain copy; values, dtype, shape and device are unchanged.
"""

from __future__ import annotations

import functools
import os

TORCHVISION_SCHEMAS = {
    # Signatures from torchvision's C++ sources (csrc/ops/nms.cpp, quantized/cpu/qnms).
    "nms": "(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms": "(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
}
# The factories SGLang's LoRA code calls with `pin_memory=True`.
PINNING_FACTORIES = ("tensor", "empty", "zeros")

_library = None  # the torch.library.Library that owns the declared schemas; kept alive


def declare_torchvision_schemas() -> None:
    """Declare torchvision's two box ops so its fake-kernel registrations find them."""
    global _library
    import torch

    if _library is not None or hasattr(torch.ops.torchvision, "nms"):
        return
    _library = torch.library.Library("torchvision", "DEF")
    for name, schema in TORCHVISION_SCHEMAS.items():
        _library.define(f"{name}{schema}")


def _without_pinning(factory):  # type: ignore[no-untyped-def]
    @functools.wraps(factory)
    def call(*args, **kwargs):  # type: ignore[no-untyped-def]
        kwargs.pop("pin_memory", None)
        return factory(*args, **kwargs)

    return call


def allow_pin_memory_without_accelerator() -> None:
    """Make pinning a no-op when there is no accelerator to pin memory for."""
    import torch

    if torch.accelerator.is_available() or getattr(torch, "_loraplex_unpinned", False):
        return
    for name in PINNING_FACTORIES:
        setattr(torch, name, _without_pinning(getattr(torch, name)))
    torch.Tensor.pin_memory = lambda self, *args, **kwargs: self.clone()  # type: ignore[method-assign]
    torch._loraplex_unpinned = True  # type: ignore[attr-defined]


def apply() -> None:
    """Apply both fixes (idempotent)."""
    declare_torchvision_schemas()
    allow_pin_memory_without_accelerator()


if os.environ.get("SGLANG_USE_CPU_ENGINE") == "1":
    apply()
