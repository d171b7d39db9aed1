"""Fake (meta) implementations of the dsa_topk ops: output shapes and dtypes
only, so torch.compile(fullgraph=True) and other FakeTensor tracing can run
through the ops without a GPU kernel. Signatures mirror the schemas in
python/csrc/binding.cpp."""

import torch


def _new_empty(like: torch.Tensor, shape, dtype: torch.dtype) -> torch.Tensor:
    return like.new_empty(shape, dtype=dtype)


@torch.library.register_fake("dsa_topk::indexer_topk")
def _indexer_topk_fake(q, k, k_scale, w, ks, ke, topk=2048, *, relative=False, deterministic=False,
                       sorted=False, return_values=False, check_ranges=True):
    rows = q.shape[0]
    indices = _new_empty(q, (rows, topk), torch.int32)
    values = _new_empty(q, (rows, topk) if return_values else (0, 0), torch.float32)
    return indices, values


@torch.library.register_fake("dsa_topk::indexer_topk_out")
def _indexer_topk_out_fake(q, k, k_scale, w, ks, ke, indices, values=None, *, relative=False,
                           deterministic=False, sorted=False, check_ranges=True):
    return None


@torch.library.register_fake("dsa_topk::topk")
def _topk_fake(scores, ks, ke, topk=2048, *, num_cols=None, relative=False, deterministic=False, sorted=False,
               return_values=False, check_ranges=True):
    rows = scores.shape[0]
    indices = _new_empty(scores, (rows, topk), torch.int32)
    values = _new_empty(scores, (rows, topk) if return_values else (0, 0), torch.float32)
    return indices, values


@torch.library.register_fake("dsa_topk::indexer_scores")
def _indexer_scores_fake(q, k, k_scale, w, ks, ke, *, clean=True, check_ranges=True):
    return _new_empty(q, (q.shape[0], k.shape[0]), torch.float32)


@torch.library.register_fake("dsa_topk::indexer_topk_paged")
def _indexer_topk_paged_fake(q, kv_cache, block_table, context_lens, w, topk=2048, *, physical_slots=False,
                             deterministic=False, sorted=False, return_values=False, check_ranges=True):
    rows = q.shape[0] * q.shape[1]
    indices = _new_empty(q, (rows, topk), torch.int32)
    values = _new_empty(q, (rows, topk) if return_values else (0, 0), torch.float32)
    return indices, values


@torch.library.register_fake("dsa_topk::indexer_topk_paged_out")
def _indexer_topk_paged_out_fake(q, kv_cache, block_table, context_lens, w, indices, values=None, *,
                                 physical_slots=False, deterministic=False, sorted=False, check_ranges=True):
    return None


@torch.library.register_fake("dsa_topk::merge_topk")
def _merge_topk_fake(values, indices, topk=2048, *, deterministic=False, sorted=False):
    rows = values.shape[1]
    return _new_empty(values, (rows, topk), torch.int32), _new_empty(values, (rows, topk), torch.float32)
