"""Drop-in replacements for the prefill indexer stage of inference engines.

Both engines run the DSA indexer's prefill as two kernels, DeepGEMM's
``fp8_mqa_logits`` (which writes the [T, N] fp32 logits) and a per-row top-k
over them. Each function here takes the same tensors those two calls take and
does both in one fused call that never writes the logits.

What the engine still does itself, before and after the call:

- Fold every per-query factor into the fp32 head weights ``w`` [T, H]: the
  FP8 quantisation scale of q, softmax_scale = head_dim ** -0.5 and
  n_heads ** -0.5. Both engines already do (vLLM in
  ``fused_indexer_q_rope_quant``, SGLang in ``_get_logits_head_gate``), since
  DeepGEMM has no q scale either. This library computes exactly
  ``k_scale[s] * sum_h w[t, h] * relu(q[t, h] . k[s])``.
- Quantise q to float8_e4m3fn [T, H, 128] (contiguous, H = 64 or 32), and
  gather the chunk's keys into float8_e4m3fn [N, 128] (row stride a multiple
  of 16 bytes) with their fp32 scales [N] (finite, > 0), as for DeepGEMM.
- Build the per-row ranges ks/ke (int32 [T]).
- Map the returned indices to KV-cache slots, as after the top-k today.
- Not covered: the FP4 indexer cache, the paged decode path (unchanged), and
  vLLM's decode-context-parallel merge, which reads the logits (the fused op
  can return the selected scores instead: ``indexer_topk_out(..., values=)``).

``check_ranges`` defaults to False here, as the kernels these functions
replace do not check ranges either and the check costs a host
synchronisation per call; the engine's metadata builder guarantees
0 <= ks <= ke <= N, and the kernels clamp rows to [0, N) regardless, so
memory stays safe. Pass True while debugging an integration.
"""

from typing import Optional, Tuple

import torch

_ops = torch.ops.dsa_topk


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
    if out is None:
        out = q_fp8.new_empty((q_fp8.shape[0], topk), dtype=torch.int32)
    elif out.dim() != 2 or out.shape[1] != topk:
        raise RuntimeError(f"out: must have shape [T, topk = {topk}] (got {list(out.shape)})")
    _ops.indexer_topk_out(q_fp8, k_fp8, k_scale, weights, ks, ke, out, None, relative=relative,
                          deterministic=deterministic, check_ranges=check_ranges)
    return out
