// The decode operators on the CUDA backend: the indexer over a paged key
// cache (indexer_topk_paged) and the exact merge of per-part top-K lists
// (merge_topk). Not part of the public API: src/api/operators.cpp validates,
// then calls these.
#pragma once

#include <cstddef>

#include "decode/plan.h"
#include "dsa_topk/dsa_topk.h"

namespace dsa::decode {

// Bytes of workspace launch_indexer_topk_paged needs (shapes, K and the
// hooks' route only).
std::size_t paged_workspace_size(const PagedIndexerTopkParams& params, const PagedHooks& hooks = {});

// Runs indexer_topk_paged (arguments validated; device pointers): no host
// synchronisation, no allocation, so it can be captured in a CUDA graph and
// replayed with new lengths and block tables in the same buffers. A route
// pinned to the fused selection where it cannot take the call is an
// invalid argument (hooks), nothing launched.
Status launch_indexer_topk_paged(const PagedIndexerTopkParams& params, CUstream_st* stream, void* workspace,
                                 std::size_t workspace_bytes, const PagedHooks& hooks = {});

// Bytes of workspace launch_merge_topk needs.
std::size_t merge_workspace_size(const MergeTopkParams& params);

// Runs merge_topk (arguments validated; device pointers).
Status launch_merge_topk(const MergeTopkParams& params, CUstream_st* stream, void* workspace,
                         std::size_t workspace_bytes);

}  // namespace dsa::decode
