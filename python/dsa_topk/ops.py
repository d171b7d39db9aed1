"""Python-facing wrappers of the ``torch.ops.dsa_topk`` ops (defined in
python/csrc/binding.cpp). They add nothing but the Python return shape; the
ops themselves can be called directly, and are what torch.compile records.

Shapes and dtypes (contract section 1), all tensors on one CUDA device::

    q        [T, H, 128]  torch.float8_e4m3fn, contiguous   (H = 64 or 32)
    k        [N, 128]     torch.float8_e4m3fn, rows contiguous; the row stride
                          may exceed 128 (a view into a wider buffer) but must
                          be a multiple of 16 bytes
    k_scale  [N]          torch.float32, finite and > 0
    w        [T, H]       torch.float32, any sign
    ks, ke   [T]          torch.int32, 0 <= ks[t] <= ke[t] <= N

    score(t, s) = k_scale[s] * sum_h w[t, h] * relu(q[t, h, :] . k[s, :])   for s in [ks[t], ke[t])

Common options:
    topk           K: 512, 1024 or 2048
    relative       return s - ks[t] instead of s (vLLM's prefill convention); -1 padding either way
    deterministic  ties at the K-th score go to the smallest indices; results then
                   depend only on the row's inputs and runs are bit-identical
    sorted         each row by descending score (ascending index among equal scores
                   when deterministic)
    check_ranges   validate every row's [ks, ke) first: one device-to-host copy and
                   a stream synchronisation. Pass False in CUDA graphs (required:
                   the check is rejected during capture) and hot loops; the kernels
                   then clamp rows to [0, N), so memory stays safe, but a row with
                   an invalid range gets an unspecified result.

Decode over a paged key cache (:func:`indexer_topk_paged`), B requests with
next_n query tokens each, row r = b * next_n + j::

    q             [B, next_n, H, 128]   torch.float8_e4m3fn, contiguous
    kv_cache      [num_blocks, block_size, 132] or [num_blocks, block_size * 132]
                                        torch.uint8, contiguous: per block, its
                                        block_size x 128 FP8 key bytes, then its
                                        block_size fp32 scales (finite, > 0); the
                                        block size (16, 32, 64 or 128) is read
                                        from the shape
    block_table   [B, max_blocks]       torch.int32, rows contiguous (any row
                                        stride); entries of the used blocks in
                                        [0, num_blocks), the others not read
    context_lens  [B] or [B, next_n]    torch.int32
    w             [B * next_n, H] or [B, next_n, H]   torch.float32

    row (b, j) scores positions p in [0, L_b - next_n + j + 1)   (context_lens [B], L_b = context_lens[b])
                                  or [0, context_lens[b, j])     (context_lens [B, next_n])
    position p is slot block_table[b, p // block_size] * block_size + p % block_size of the cache

Its indices are positions p (vLLM's decode convention) or, with
physical_slots, those slots (SGLang's and FlashInfer's); -1 padding either
way. :func:`merge_topk` is the exact top-K over several parts' top-K lists
(a context split over CTAs or context-parallel ranks).

Errors raise RuntimeError with the argument and the broken rule, e.g.
``dsa_topk.indexer_topk: invalid argument: ks[3]: must be <= ke[3] (ks=9, ke=4)``;
a rejected call writes nothing to its outputs.
"""

from typing import Optional, Tuple, Union

import torch

_ops = torch.ops.dsa_topk


def indexer_topk(q: torch.Tensor, k: torch.Tensor, k_scale: torch.Tensor, w: torch.Tensor, ks: torch.Tensor,
                 ke: torch.Tensor, topk: int = 2048, *, relative: bool = False, deterministic: bool = False,
                 sorted: bool = False, return_values: bool = False,
                 check_ranges: bool = True) -> Union[torch.Tensor, Tuple[torch.Tensor, torch.Tensor]]:
    """The fused indexer top-k: int32 indices [T, topk], row t holding
    min(topk, ke[t] - ks[t]) distinct keys of [ks[t], ke[t]) then -1. With
    return_values, also their fp32 scores [T, topk] (-inf in padded slots)."""
    indices, values = _ops.indexer_topk(q, k, k_scale, w, ks, ke, topk, relative=relative,
                                        deterministic=deterministic, sorted=sorted, return_values=return_values,
                                        check_ranges=check_ranges)
    return (indices, values) if return_values else indices


def indexer_topk_out(q: torch.Tensor, k: torch.Tensor, k_scale: torch.Tensor, w: torch.Tensor, ks: torch.Tensor,
                     ke: torch.Tensor, indices: torch.Tensor, values: Optional[torch.Tensor] = None, *,
                     relative: bool = False, deterministic: bool = False, sorted: bool = False,
                     check_ranges: bool = True) -> torch.Tensor:
    """indexer_topk into the caller's contiguous int32 buffer ``indices`` [T, K]
    (K = indices.size(1)) and optionally fp32 ``values`` [T, K]. Its only
    allocation is the operator's workspace, from PyTorch's caching allocator
    (at most 512 MB up to 128K keys; it never holds the [T, N] scores), so it
    can be captured in a CUDA graph (with check_ranges=False). Returns
    ``indices``."""
    _ops.indexer_topk_out(q, k, k_scale, w, ks, ke, indices, values, relative=relative,
                          deterministic=deterministic, sorted=sorted, check_ranges=check_ranges)
    return indices


def topk(scores: torch.Tensor, ks: torch.Tensor, ke: torch.Tensor, topk: int = 2048, *,
         num_cols: Optional[int] = None, relative: bool = False, deterministic: bool = False, sorted: bool = False,
         return_values: bool = False,
         check_ranges: bool = True) -> Union[torch.Tensor, Tuple[torch.Tensor, torch.Tensor]]:
    """The standalone top-k over fp32 ``scores`` [T, stride] (rows contiguous,
    any row stride): row t's candidates are scores[t, ks[t]:ke[t]], with
    ke[t] <= num_cols (default scores.size(1)). Same outputs and options as
    :func:`indexer_topk`."""
    indices, values = _ops.topk(scores, ks, ke, topk, num_cols=num_cols, relative=relative,
                                deterministic=deterministic, sorted=sorted, return_values=return_values,
                                check_ranges=check_ranges)
    return (indices, values) if return_values else indices


def indexer_scores(q: torch.Tensor, k: torch.Tensor, k_scale: torch.Tensor, w: torch.Tensor, ks: torch.Tensor,
                   ke: torch.Tensor, *, clean: bool = True, check_ranges: bool = True) -> torch.Tensor:
    """The scoring kernel alone: fp32 scores [T, N]. With ``clean`` (the
    default) entries outside a row's [ks[t], ke[t]) are -inf: only those
    entries are filled, beside the kernel that writes the range. With
    ``clean=False`` they hold whatever the allocation held (DeepGEMM's
    ``clean_logits=False``), for callers that read only the ranges.
    Bit-identical to the scores the fused operator selects from."""
    return _ops.indexer_scores(q, k, k_scale, w, ks, ke, clean=clean, check_ranges=check_ranges)


def indexer_topk_paged(q: torch.Tensor, kv_cache: torch.Tensor, block_table: torch.Tensor,
                       context_lens: torch.Tensor, w: torch.Tensor, topk: int = 2048, *, physical_slots: bool = False,
                       deterministic: bool = False, sorted: bool = False, return_values: bool = False,
                       check_ranges: bool = True) -> Union[torch.Tensor, Tuple[torch.Tensor, torch.Tensor]]:
    """The indexer top-k of decode, keys read through the block table: int32
    indices [B * next_n, topk], row (b, j) holding min(topk, len(b, j))
    distinct positions of [0, len(b, j)) (or, with ``physical_slots``, their
    cache slots) then -1. With return_values, also their fp32 scores
    [B * next_n, topk] (-inf in padded slots), bit-identical to
    :func:`indexer_topk` on the same keys gathered into a contiguous k.

    check_ranges validates every length (>= 0 and within the table,
    max_blocks * block_size) and every used table entry (in [0, num_blocks))
    with one device-to-host copy and a stream synchronisation. Pass False in
    CUDA graphs: lengths are then clamped to the table and an entry outside
    the cache reads zero keys, so memory stays safe, but such a row's result
    is unspecified."""
    indices, values = _ops.indexer_topk_paged(q, kv_cache, block_table, context_lens, w, topk,
                                              physical_slots=physical_slots, deterministic=deterministic,
                                              sorted=sorted, return_values=return_values, check_ranges=check_ranges)
    return (indices, values) if return_values else indices


def indexer_topk_paged_out(q: torch.Tensor, kv_cache: torch.Tensor, block_table: torch.Tensor,
                           context_lens: torch.Tensor, w: torch.Tensor, indices: torch.Tensor,
                           values: Optional[torch.Tensor] = None, *, physical_slots: bool = False,
                           deterministic: bool = False, sorted: bool = False,
                           check_ranges: bool = True) -> torch.Tensor:
    """indexer_topk_paged into the caller's contiguous int32 buffer ``indices``
    [B * next_n, K] (K = indices.size(1)) and optionally fp32 ``values`` of the
    same shape. Its only allocation is the operator's workspace, from
    PyTorch's caching allocator, so it can be captured in a CUDA graph (with
    check_ranges=False) and replayed with new lengths and block tables in the
    same buffers. Returns ``indices``."""
    _ops.indexer_topk_paged_out(q, kv_cache, block_table, context_lens, w, indices, values,
                                physical_slots=physical_slots, deterministic=deterministic, sorted=sorted,
                                check_ranges=check_ranges)
    return indices


def merge_topk(values: torch.Tensor, indices: torch.Tensor, topk: int = 2048, *, deterministic: bool = False,
               sorted: bool = False) -> Tuple[torch.Tensor, torch.Tensor]:
    """The exact top-``topk`` of each row over P parts' candidate lists:
    ``values`` fp32 and ``indices`` int32, both [P, R, part_k] and contiguous,
    entry (p, r, i) being candidate indices[p, r, i] with score
    values[p, r, i]; index -1 marks an empty slot (ignored). Within a row the
    non-empty indices must be distinct across parts (the parts cover
    disjoint keys: top-K lists of disjoint key ranges, e.g. from
    :func:`indexer_topk` with return_values and absolute indices); a row with
    duplicates gets an unspecified result. NaN ranks as -inf.

    Returns (indices [R, topk] int32, values [R, topk] fp32): per row the
    min(topk, non-empty) selected indices, passed through as given, then -1,
    with their values as given (-inf in padded slots). ``deterministic``
    breaks ties at the K-th score by the smallest index and ``sorted`` orders
    each row by descending score, as for :func:`indexer_topk`. It never
    synchronises (indices are not read back to be checked: one below -1
    gives an unspecified result), so it can always be captured in a CUDA
    graph."""
    return _ops.merge_topk(values, indices, topk, deterministic=deterministic, sorted=sorted)
