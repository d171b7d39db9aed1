// options.check_finite (contract section 3, "Bad input"): the first NaN/Inf
// of each input an operator reads, found where the inputs live (host loops
// for kCpu, device scans for kCuda), and one report of what was found, so the
// two backends name the same element in the same words.
#pragma once

#include <cstdint>

#include "dsa_topk/dsa_topk.h"

namespace dsa::finite {

// The first offending element of one input: its index in the order the
// input is checked (given per operator below), and for fp32 inputs the
// element itself. FP8 e4m3fn has no infinities: its offenders are NaN bytes.
struct First {
  std::int64_t index = -1;  // -1: every element is finite
  float value = 0.0f;
  bool found() const { return index >= 0; }
};

// indexer_topk. q: byte i of [T, H, D]; k: s * D + d over the key bytes
// (each row's padding up to k_row_stride is not read); k_scale: s; w: t * H + h.
struct IndexerFindings {
  First q, k, k_scale, w;
};

// topk: t * score_stride + s over each row's [ks[t], ke[t]) only (the matrix
// may hold anything outside the ranges).
struct ScoresFindings {
  First scores;
};

// indexer_topk_paged. q and w as for indexer_topk; kv: the first position any
// row of a request reads whose key bytes or scale offend, as
// b * max_context() + p (cache slots no row reads may hold anything), with
// its slot, its first NaN key byte (-1: the keys are finite, the scale is
// not) and its scale as kv.value.
struct PagedFindings {
  First q, kv, w;
  std::int64_t slot = 0;
  int key_byte = -1;
};

// merge_topk: entry (p * R + r) * part_k + i over the non-empty entries.
struct MergeFindings {
  First values;
};

// kNonFiniteInput naming the first offender, inputs in the order listed
// above (q before k before k_scale before w); Ok when every input is finite.
// On the CUDA backend this synchronises ctx.stream.
Status check(const IndexerTopkParams& params, const ExecutionContext& ctx);
Status check(const TopkParams& params, const ExecutionContext& ctx);
Status check(const PagedIndexerTopkParams& params, const ExecutionContext& ctx);
Status check(const MergeTopkParams& params, const ExecutionContext& ctx);

// The device side of check(): scans of device (or managed) inputs on
// `stream`, then one synchronous copy of the findings to the host. The
// arguments are validated; with range checks off, row ranges, lengths and
// table entries are clamped as the kernels clamp them.
Status find_on_device(const IndexerTopkParams& params, CUstream_st* stream, IndexerFindings* out);
Status find_on_device(const TopkParams& params, CUstream_st* stream, ScoresFindings* out);
Status find_on_device(const PagedIndexerTopkParams& params, CUstream_st* stream, PagedFindings* out);
Status find_on_device(const MergeTopkParams& params, CUstream_st* stream, MergeFindings* out);

}  // namespace dsa::finite
