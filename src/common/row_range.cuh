// A row's key range as every kernel reads it: [ks[t], ke[t]) clamped to
// [0, num_keys), so unvalidated ranges (ExecutionContext::check_ranges =
// false) can never address memory outside the inputs and outputs; such a
// row gets an unspecified in-bounds result (dsa_topk.h). A row whose
// row_mask entry has bit 0 clear gets an empty range (RowFlag).
#pragma once

#include <cstdint>

namespace dsa {

struct RowRange {
  std::int32_t begin = 0, end = 0;
};

// What a select stage flags a row for, as the repair's row mask holds it:
// rows flagged kRowRescore (the fused operator's rows whose certificate
// failed) are scored again, so row_range gives every other row an empty
// range, and the standalone top-k skips rows flagged kRowDone. kRowStored
// marks the decode bar selection's short rows, selected from the scores
// they stored (a count for tools: that route repairs nothing).
enum RowFlag : std::uint32_t { kRowDone = 0, kRowRescore = 1, kRowStored = 2 };
static_assert((kRowRescore & 1u) != 0 && (kRowStored & 1u) == 0, "row_range tests bit 0");

// Whether a row of the decode bar selection stores its scores instead of
// keeping entries by its length: fewer keys than stored_below
// (PagedPlan::bar_stored_below). Its zero kernel also stores a row whose
// query is zero, and flags each row for the kernels after it.
__host__ __device__ __forceinline__ bool row_stores_scores(const RowRange& r, std::int32_t stored_below) {
  return r.end - r.begin < stored_below;
}

__device__ __forceinline__ RowRange row_range(const std::int32_t* __restrict__ ks, const std::int32_t* __restrict__ ke,
                                              const std::uint32_t* __restrict__ row_mask, std::int64_t t,
                                              std::int64_t num_keys) {
  const std::int32_t n = static_cast<std::int32_t>(num_keys);
  RowRange r;
  r.begin = min(max(__ldg(ks + t), 0), n);
  r.end = min(max(__ldg(ke + t), r.begin), n);
  if (row_mask != nullptr && (__ldg(row_mask + t) & 1u) == 0) r.end = r.begin;
  return r;
}

}  // namespace dsa
