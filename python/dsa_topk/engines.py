"""Drop-in replacements for the indexer stage of inference engines.

Both engines run the DSA indexer as two kernels: in prefill DeepGEMM's
``fp8_mqa_logits`` (which writes the [T, N] fp32 logits over the gathered
keys), in decode ``fp8_paged_mqa_logits`` (which writes [B * next_n,
max_context] logits, reading the keys through the block table of the paged
indexer cache), then a per-row top-k over the logits. Each function here
takes the same tensors those two calls take and does both in one fused call
that never writes the logits.

What the engine still does itself, before and after the call:

- Fold every per-query factor into the fp32 head weights ``w`` [T, H]: the
  FP8 quantisation scale of q, softmax_scale = head_dim ** -0.5 and
  n_heads ** -0.5. Both engines already do (vLLM in
  ``fused_indexer_q_rope_quant``, SGLang in ``_get_logits_head_gate``), since
  DeepGEMM has no q scale either. This library computes exactly
  ``k_scale[s] * sum_h w[t, h] * relu(q[t, h] . k[s])``.
- Quantise q to float8_e4m3fn [T, H, 128] (contiguous, H = 64 or 32). In
  prefill, gather the chunk's keys into float8_e4m3fn [N, 128] (row stride a
  multiple of 16 bytes) with their fp32 scales [N] (finite, > 0), as for
  DeepGEMM; in decode the keys stay in the paged cache, in the layout both
  engines write (per block, its block_size x 128 FP8 key bytes, then its
  block_size fp32 scales).
- Build the per-row ranges ks/ke (int32 [T]) in prefill, the lengths and the
  block table in decode (its metadata builder already does).
- Map the returned indices to KV-cache slots where the engine does so after
  its top-k today (SGLang's decode form returns the slots directly).
- Speculative-decode padding (vLLM's ``pack_seq_triton`` /
  ``unpack_seq_triton`` around the decode stage) stays the engine's.
- Not covered: the FP4 indexer cache, and vLLM's decode-context-parallel
  merge, which reads the logits. Its equivalent here: each rank returns its
  top-K with scores (``indexer_topk_paged(..., return_values=True)``), maps
  the indices to global token ids, all-gathers the [P, R, K] values and ids,
  and :func:`dsa_topk.merge_topk` selects the exact global top-K.

``check_ranges`` defaults to False here, as the kernels these functions
replace do not check ranges either and the check costs a host
synchronisation per call; the engine's metadata builder guarantees
0 <= ks <= ke <= N (in decode: lengths within the block table, used entries
inside the cache), and the kernels clamp regardless, so memory stays safe.
Pass True while debugging an integration.
"""

from typing import Optional, Tuple

import torch

_ops = torch.ops.dsa_topk


def _output(out: Optional[torch.Tensor], like: torch.Tensor, rows: int, topk: int) -> torch.Tensor:
    """The int32 [rows, topk] indices buffer of an SGLang stage: ``out``, or a
    new one on ``like``'s device. The op checks the rest of ``out``."""
    if out is None:
        return like.new_empty((rows, topk), dtype=torch.int32)
    if out.dim() != 2 or out.shape[1] != topk:
        raise RuntimeError(f"out: must have shape [T, topk = {topk}] (got {list(out.shape)})")
    return out


def vllm_indexer_topk_prefill(q_fp8: torch.Tensor, k_fp8: torch.Tensor, k_scale: torch.Tensor,
                              weights: torch.Tensor, cu_seqlen_ks: torch.Tensor, cu_seqlen_ke: torch.Tensor,
                              topk_indices: torch.Tensor, *, deterministic: bool = False,
                              check_ranges: bool = False) -> torch.Tensor:
    """vLLM's prefill indexer stage for one chunk, in one call. Replaces::

        logits = fp8_mqa_logits(q_fp8, (k_fp8, k_scale), weights,
                                cu_seqlen_ks, cu_seqlen_ke, clean_logits=False)
        ops.top_k_per_row_prefill(logits, cu_seqlen_ks, cu_seqlen_ke, topk_indices,
                                  num_rows, logits.stride(0), logits.stride(1), topk_tokens)

    with ``vllm_indexer_topk_prefill(q_fp8, k_fp8, k_scale, weights,
    cu_seqlen_ks, cu_seqlen_ke, topk_indices)``.

    q_fp8 [T, H, 128] float8_e4m3fn; k_fp8 [N, 128] float8_e4m3fn (the
    gathered chunk keys); k_scale [N] float32 (vLLM's gathered scale bytes
    viewed as float32 and squeezed); weights [T, H] float32;
    cu_seqlen_ks/ke [T] int32; topk_indices [T, topk_tokens] int32, a
    contiguous block of rows of vLLM's topk_indices_buffer (topk_tokens = 512,
    1024 or 2048). Every slot of topk_indices is written: each row holds
    min(topk_tokens, ke - ks) indices relative to cu_seqlen_ks, then -1
    (the buffer's -1 pre-fill is not needed for these rows). Returns
    topk_indices.
    """
    _ops.indexer_topk_out(q_fp8, k_fp8, k_scale, weights, cu_seqlen_ks, cu_seqlen_ke, topk_indices, None,
                          relative=True, deterministic=deterministic, check_ranges=check_ranges)
    return topk_indices


def sglang_indexer_topk_ragged(q_fp8: torch.Tensor, kv_fp8: Tuple[torch.Tensor, torch.Tensor],
                               weights: torch.Tensor, ks: torch.Tensor, ke: torch.Tensor, topk: int, *,
                               out: Optional[torch.Tensor] = None, relative: bool = True,
                               deterministic: bool = False, check_ranges: bool = False) -> torch.Tensor:
    """SGLang's ragged (extend) indexer stage in one call. Replaces, in the
    NSA ``Indexer._get_topk_ragged``::

        logits = deep_gemm.fp8_mqa_logits(q_fp8, kv_fp8, weights, ks, ke, clean_logits=False)
        topk_result = metadata.topk_transform(logits, topk, ks=ks)
        # unfused, that transform is fast_topk_v2(logits, ke - ks, topk, row_starts=ks)

    with ``topk_result = sglang_indexer_topk_ragged(q_fp8, kv_fp8, weights, ks, ke, topk)``.

    q_fp8 [T, H, 128] float8_e4m3fn; kv_fp8 = (k_fp8 [N, 128]
    float8_e4m3fn, k_scale [N] float32), the concatenated keys of the batch;
    weights [T, H, 1] or [T, H] float32; ks/ke [T] int32 (the
    ``get_indexer_kvcache_range()`` of the metadata); topk 512, 1024 or 2048.

    Returns int32 [T, topk] (or fills ``out``, a contiguous int32 [T, topk]
    such as ``topk_result[:T]``): min(topk, ke - ks) indices per row, then -1.
    relative=True gives index - ks (what the unfused top-k returns);
    relative=False gives the index into the concatenated keys, which is what
    the fused RAGGED transform returns when its topk_indices_offset equals ks.
    The page-table (PAGED) transform stays the engine's step.
    """
    k_fp8, k_scale = kv_fp8
    if weights.dim() == 3 and weights.shape[-1] == 1:
        weights = weights.squeeze(-1)
    out = _output(out, q_fp8, q_fp8.shape[0], topk)
    _ops.indexer_topk_out(q_fp8, k_fp8, k_scale, weights, ks, ke, out, None, relative=relative,
                          deterministic=deterministic, check_ranges=check_ranges)
    return out


def vllm_indexer_topk_decode(q_fp8: torch.Tensor, kv_cache: torch.Tensor, weights: torch.Tensor,
                             seq_lens: torch.Tensor, block_table: torch.Tensor, topk_indices: torch.Tensor, *,
                             deterministic: bool = False, check_ranges: bool = False) -> torch.Tensor:
    """vLLM's decode indexer stage in one call. Replaces, in
    sparse_attn_indexer's decode branch::

        logits = fp8_paged_mqa_logits(q_fp8, kv_cache, weights, seq_lens, block_table,
                                      schedule_metadata, max_model_len, clean_logits=False)
        ops.top_k_per_row_decode(logits, next_n, seq_lens, topk_indices, num_rows,
                                 logits.stride(0), logits.stride(1), topk_tokens)
        # (or the persistent / cooperative top-k over the same logits)

    with ``vllm_indexer_topk_decode(q_fp8, kv_cache, weights, seq_lens,
    block_table, topk_indices)``; no schedule metadata is needed.

    q_fp8 [B, next_n, H, 128] float8_e4m3fn (the padded decode queries);
    kv_cache the layer's indexer cache, uint8 [num_blocks, block_size, 132]
    or DeepGEMM's view of it [num_blocks, block_size, 1, 132]; weights
    [B * next_n, H] float32; seq_lens int32 [B] (each request's context
    length including its next_n new tokens: token j sees
    seq_lens[b] - next_n + j + 1 keys) or [B, next_n] (each token's own
    length); block_table int32 [B, max_blocks] (a row slice of the
    persistent table is fine); topk_indices [B * next_n, topk_tokens] int32,
    contiguous, the first rows of vLLM's topk_indices_buffer (topk_tokens =
    512, 1024 or 2048). Every slot is written: each row holds min(topk_tokens,
    its length) positions in the request's context (vLLM's decode convention,
    which the sparse attention maps through the block table), then -1.
    Returns topk_indices.
    """
    if kv_cache.dim() == 4 and kv_cache.shape[2] == 1:
        kv_cache = kv_cache.squeeze(2)
    _ops.indexer_topk_paged_out(q_fp8, kv_cache, block_table, seq_lens, weights, topk_indices, None,
                                deterministic=deterministic, check_ranges=check_ranges)
    return topk_indices


def sglang_indexer_topk_paged(q_fp8: torch.Tensor, kv_cache_fp8: torch.Tensor, weights: torch.Tensor,
                              seqlens: torch.Tensor, page_table: torch.Tensor, topk: int, *,
                              out: Optional[torch.Tensor] = None, physical_slots: bool = True,
                              deterministic: bool = False, check_ranges: bool = False) -> torch.Tensor:
    """SGLang's paged (decode) indexer stage in one call. Replaces, in the
    NSA ``Indexer._get_topk_paged``::

        logits = deep_gemm.fp8_paged_mqa_logits(q_fp8.view(batch_size, -1, H, 128),
                                                kv_cache_fp8.view(num_pages, 64, 1, 132),
                                                weights.squeeze(2), seqlens_32, block_tables,
                                                schedule_metadata, max_seq_len, clean_logits=False)
        topk_result = metadata.topk_transform(logits, self.index_topk)
        # fused, that transform is fast_topk_transform_fused(logits, seqlens, topk,
        # dst_page_table, src_page_table=page_table_1, ...)

    with ``topk_result = sglang_indexer_topk_paged(q_fp8, kv_cache_fp8,
    weights, seqlens_32, block_tables, index_topk)``.

    q_fp8 [T, H, 128] float8_e4m3fn with T = batch_size * next_n, batch_size
    = page_table.size(0) (or already [B, next_n, H, 128]); kv_cache_fp8 the
    layer's ``get_index_k_with_scale_buffer``, uint8 [num_pages, page_size *
    132] (the page size is read from it); weights [T, H, 1] or [T, H]
    float32; seqlens int32 [B] (``get_seqlens_int32()``: with next_n > 1,
    token j sees seqlens[b] - next_n + j + 1 keys) or [T] / [B, next_n], one
    length per token (``get_seqlens_expanded()``); page_table int32 [B,
    max_pages] (``get_page_table_64()``); topk 512, 1024 or 2048.

    Returns int32 [T, topk] (or fills ``out``, a contiguous int32 [T, topk]):
    per row min(topk, its length) indices, then -1. physical_slots=True (the
    default) gives the KV-pool slots page_table[b, p // page_size] *
    page_size + p % page_size, i.e. ``page_table_1[b, p]``, which is what the
    fused PAGED transform returns; physical_slots=False gives the positions p
    (what the unfused ``fast_topk_v2`` returns).
    """
    if q_fp8.dim() == 3:
        batch = page_table.shape[0]
        next_n = q_fp8.shape[0] // batch if batch else 1
        if q_fp8.shape[0] != batch * next_n:
            raise RuntimeError(f"q_fp8: size(0) must be a multiple of page_table.size(0) = {batch} "
                               f"(got shape {list(q_fp8.shape)})")
        q_fp8 = q_fp8.view(batch, next_n, *q_fp8.shape[1:])
    batch, next_n = q_fp8.shape[0], q_fp8.shape[1]
    if weights.dim() == 3 and weights.shape[-1] == 1:
        weights = weights.squeeze(-1)
    if next_n > 1 and seqlens.dim() == 1 and seqlens.shape[0] == batch * next_n:
        seqlens = seqlens.view(batch, next_n)
    out = _output(out, q_fp8, batch * next_n, topk)
    _ops.indexer_topk_paged_out(q_fp8, kv_cache_fp8, page_table, seqlens, weights, out, None,
                                physical_slots=physical_slots, deterministic=deterministic,
                                check_ranges=check_ranges)
    return out
