"""A pure-PyTorch stand-in for `sgl_kernel`, for SGLang's CPU path (sglang 0.5.23).

SGLang imports a handful of names from `sgl_kernel` under `if _is_cpu:` even though the
CPU build of that package cannot be installed from PyPI. Only two are called on the plain
(non-speculative) path; both have Triton counterparts in SGLang that define what they do:

- `assign_req_to_token_pool_cpu` — `sglang/srt/mem_cache/allocation.py`
  (`assign_req_to_token_pool`), every prefill and decode step;
- `copy_all_layer_kv_cache_cpu` — `sglang/kernels/ops/kvcache/cache_move.py`
  (`copy_all_layer_kv_cache_tiled`), used by `move_kv_cache`.

The speculative-decoding names only have to exist; calling one is an error.

Nothing is registered under `torch.ops.sgl_kernel`, on purpose: SGLang probes that namespace
with `hasattr` to choose its fused CPU kernels, and with every probe false it keeps its own
torch-native norms, rotary embedding, activations, linear layers and attention.

This package is copied into the SGLang engine's virtual environment by the launcher; it is
never imported by the platform itself (only by its unit tests).
"""

from __future__ import annotations

import ctypes

import torch

__all__ = [
    "SPECULATIVE_ONLY",
    "assign_req_to_token_pool_cpu",
    "copy_all_layer_kv_cache_cpu",
]


def assign_req_to_token_pool_cpu(
    req_pool_indices: torch.Tensor,
    req_to_token: torch.Tensor,
    start_offset: torch.Tensor,
    end_offset: torch.Tensor,
    out_cache_loc: torch.Tensor,
    pool_len: int,
) -> None:
    """Write each request's new KV-cache locations into its row of the token pool.

    Request i owns `end_offset[i] - start_offset[i]` consecutive entries of `out_cache_loc`,
    packed in batch order; they go to `req_to_token[req_pool_indices[i], start:end]`.
    `pool_len` (the row length) is implied by `req_to_token`'s shape; SGLang passes it.
    """
    del pool_len
    lengths = (end_offset - start_offset).to(torch.long)
    total = int(lengths.sum())
    if total == 0:
        return
    rows = torch.repeat_interleave(req_pool_indices.to(torch.long), lengths)
    packed_starts = torch.cumsum(lengths, 0) - lengths  # where each request's slice begins
    position = torch.arange(total, dtype=torch.long) - torch.repeat_interleave(
        packed_starts, lengths
    )
    columns = torch.repeat_interleave(start_offset.to(torch.long), lengths) + position
    req_to_token[rows, columns] = out_cache_loc[:total].to(req_to_token.dtype)


def copy_all_layer_kv_cache_cpu(
    data_ptrs: torch.Tensor,
    strides: torch.Tensor,
    tgt_loc: torch.Tensor,
    src_loc: torch.Tensor,
) -> None:
    """Copy rows `src_loc → tgt_loc` in every KV buffer, given as base address + row bytes.

    All sources are read before any target is written, so overlapping moves are safe, as
    the Triton kernel documents for itself.
    """
    if src_loc.numel() == 0:
        return
    src, tgt = src_loc.to(torch.long), tgt_loc.to(torch.long)
    rows = int(torch.maximum(src.max(), tgt.max())) + 1
    for address, stride in zip(data_ptrs.tolist(), strides.tolist(), strict=True):
        raw = (ctypes.c_uint8 * (rows * stride)).from_address(address)
        buffer = torch.frombuffer(raw, dtype=torch.uint8).view(rows, stride)
        buffer[tgt] = buffer.index_select(0, src)  # index_select copies: sources read first


def _speculative_only(name: str):  # type: ignore[no-untyped-def]
    def refuse(*args: object, **kwargs: object) -> None:
        raise NotImplementedError(
            f"sgl_kernel.{name}: speculative decoding is not available on the CPU stand-in"
        )

    refuse.__name__ = refuse.__qualname__ = name
    refuse.__doc__ = f"{name}: imported by SGLang's speculative decoding; refuses if called."
    return refuse


#: Names SGLang imports under `_is_cpu` only for speculative decoding.
SPECULATIVE_ONLY = (
    "assign_draft_cache_locs_contiguous_cpu",
    "assign_extend_cache_locs_cpu",
    "build_tree_kernel_efficient_cpu",
    "fill_accept_out_cache_loc_cpu",
    "fill_bonus_tokens_cpu",
    "rotate_input_ids_cpu",
    "verify_tree_greedy_cpu",
)
globals().update({name: _speculative_only(name) for name in SPECULATIVE_ONLY})
